// An nvbench-style harness: a small framework in one file, the way CUTLASS's
// profiler and nvbench measure kernels. A registry of benchmarks (saxpy and a
// reduction); for each, the grid is sized from
// cudaOccupancyMaxActiveBlocksPerMultiprocessor, and every sample writes an
// L2 flush buffer on the stream first, then times one launch between two
// CUDA events; samples go on until their noise (relative standard deviation)
// is under MAX_NOISE or there are MAX_SAMPLES of them. One summary line per
// benchmark; each result is checked on the host (exit 1 on a mismatch, 2 on
// a failed call). Needs nvcc, so it is a GPU-only corpus entry
// (make -C native corpus-gpu):
//
//   nvcc -O2 -cudart shared -o nvbench_style nvbench_style.cu
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                         \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) {                                                                            \
            fprintf(stderr, "nvbench_style: %s failed: %s\n", #call, cudaGetErrorName(e_));                 \
            exit(2);                                                                                        \
        }                                                                                                   \
    } while (0)

#define N (1 << 24)
#define BLOCK 256  // a power of two: the reduction halves it
#define MIN_SAMPLES 10
#define MAX_SAMPLES 200
#define MAX_NOISE 0.005  // nvbench's default

__global__ void saxpy(int n, float a, const float *x, const float *y, float *out)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        out[i] = a * x[i] + y[i];
}

// One partial sum per block (the host adds them): the result does not depend
// on how many samples ran before it.
__global__ void reduce_sum(int n, const float *x, float *partial)
{
    __shared__ float sums[BLOCK];
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        acc += x[i];
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned step = blockDim.x / 2; step > 0; step >>= 1) {
        if (threadIdx.x < step)
            sums[threadIdx.x] += sums[threadIdx.x + step];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        partial[blockIdx.x] = sums[0];
}

// The inputs: quarters and small integers, so that saxpy's results and the
// reduction's partial sums are exact in fp32.
static float *host_x, *host_y, *dev_x, *dev_y, *dev_out, *dev_partial;
static const float A = 2.0f;

static void saxpy_launch(int grid, cudaStream_t s)
{
    saxpy<<<grid, BLOCK, 0, s>>>(N, A, dev_x, dev_y, dev_out);
}

static int saxpy_verify(int grid)
{
    (void)grid;
    float *out = (float *)malloc((size_t)N * sizeof(float));
    CHECK(cudaMemcpy(out, dev_out, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < N; i++)
        if (out[i] != A * host_x[i] + host_y[i] && wrong++ < 4)
            fprintf(stderr, "nvbench_style: saxpy out[%d] = %g, the host has %g\n", i, out[i],
                    A * host_x[i] + host_y[i]);
    free(out);
    return wrong;
}

static void reduce_launch(int grid, cudaStream_t s)
{
    reduce_sum<<<grid, BLOCK, 0, s>>>(N, dev_x, dev_partial);
}

static int reduce_verify(int grid)
{
    float *partial = (float *)malloc((size_t)grid * sizeof(float));
    CHECK(cudaMemcpy(partial, dev_partial, (size_t)grid * sizeof(float), cudaMemcpyDeviceToHost));
    double device = 0.0, host = 0.0;
    for (int b = 0; b < grid; b++)
        device += partial[b];
    for (int i = 0; i < N; i++)
        host += host_x[i];
    free(partial);
    if (fabs(device - host) > 1e-6 * fabs(host)) {
        fprintf(stderr, "nvbench_style: reduce_sum %.3f, the host has %.3f\n", device, host);
        return 1;
    }
    return 0;
}

struct benchmark {
    const char *name;
    const void *kernel;  // for the occupancy query
    void (*launch)(int grid, cudaStream_t s);
    int (*verify)(int grid);  // how many results are wrong
    double bytes;  // moved per launch
};

static const struct benchmark registry[] = {
    {"saxpy", (const void *)saxpy, saxpy_launch, saxpy_verify, 3.0 * N * sizeof(float)},
    {"reduce_sum", (const void *)reduce_sum, reduce_launch, reduce_verify, 1.0 * N * sizeof(float)},
};

struct harness {
    struct cudaDeviceProp prop;
    cudaStream_t stream;
    cudaEvent_t start, stop;
    void *flush;  // written before each sample, so that no sample finds its inputs in L2
    size_t flush_bytes;
};

static int by_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double noise(const float *ms, int count)
{
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < count; i++)
        mean += ms[i];
    mean /= count;
    for (int i = 0; i < count; i++)
        var += (ms[i] - mean) * (ms[i] - mean);
    var /= count - 1;
    return mean > 0.0 ? sqrt(var) / mean : INFINITY;
}

static int run_benchmark(struct harness *h, const struct benchmark *b)
{
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, b->kernel, BLOCK, 0));
    if (per_sm < 1) {
        fprintf(stderr, "nvbench_style: %s: no block of %d threads fits on an SM\n", b->name, BLOCK);
        exit(1);
    }
    int grid = per_sm * h->prop.multiProcessorCount;
    b->launch(grid, h->stream);  // warm-up: loads the module, first-touch costs
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(h->stream));

    float ms[MAX_SAMPLES];
    int count = 0;
    double rel = INFINITY;
    while (count < MAX_SAMPLES) {
        CHECK(cudaMemsetAsync(h->flush, count & 0xff, h->flush_bytes, h->stream));
        CHECK(cudaEventRecord(h->start, h->stream));
        b->launch(grid, h->stream);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(h->stop, h->stream));
        CHECK(cudaEventSynchronize(h->stop));
        CHECK(cudaEventElapsedTime(&ms[count], h->start, h->stop));
        count++;
        if (count >= MIN_SAMPLES && (rel = noise(ms, count)) < MAX_NOISE)
            break;
    }
    CHECK(cudaStreamSynchronize(h->stream));
    int wrong = b->verify(grid);
    qsort(ms, (size_t)count, sizeof ms[0], by_float);
    float median = count % 2 ? ms[count / 2] : (ms[count / 2 - 1] + ms[count / 2]) / 2.0f;
    printf("nvbench_style: %s grid %d (%d blocks/SM x %d SMs) block %d, %d samples (%s, noise %.2f%%), "
           "median %.3f us, %.1f GB/s, %s\n",
           b->name, grid, per_sm, h->prop.multiProcessorCount, BLOCK, count,
           rel < MAX_NOISE ? "converged" : "sample cap", 100.0 * rel, median * 1e3, b->bytes / (median * 1e-3) / 1e9,
           wrong ? "WRONG" : "checked");
    return wrong;
}

int main(void)
{
    struct harness h;
    int device = 0;
    CHECK(cudaSetDevice(device));
    CHECK(cudaGetDeviceProperties(&h.prop, device));
    CHECK(cudaStreamCreateWithFlags(&h.stream, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&h.start));
    CHECK(cudaEventCreate(&h.stop));
    // Twice the L2 (its size where the device reports none): one memset
    // leaves nothing of the inputs there.
    h.flush_bytes = h.prop.l2CacheSize > 0 ? 2 * (size_t)h.prop.l2CacheSize : (size_t)64 << 20;
    CHECK(cudaMalloc(&h.flush, h.flush_bytes));

    size_t bytes = (size_t)N * sizeof(float);
    host_x = (float *)malloc(bytes);
    host_y = (float *)malloc(bytes);
    if (!host_x || !host_y) {
        fprintf(stderr, "nvbench_style: out of host memory\n");
        return 2;
    }
    for (int i = 0; i < N; i++) {
        host_x[i] = (float)(i % 17) * 0.25f;
        host_y[i] = (float)(i % 5 - 2);
    }
    CHECK(cudaMalloc((void **)&dev_x, bytes));
    CHECK(cudaMalloc((void **)&dev_y, bytes));
    CHECK(cudaMalloc((void **)&dev_out, bytes));
    // As many partial sums as the largest grid an occupancy query can give.
    int max_per_sm = 0;
    CHECK(cudaDeviceGetAttribute(&max_per_sm, cudaDevAttrMaxBlocksPerMultiprocessor, device));
    CHECK(cudaMalloc((void **)&dev_partial, (size_t)max_per_sm * h.prop.multiProcessorCount * sizeof(float)));
    CHECK(cudaMemcpy(dev_x, host_x, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dev_y, host_y, bytes, cudaMemcpyHostToDevice));

    int failed = 0;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        failed += run_benchmark(&h, &registry[i]) != 0;

    CHECK(cudaFree(dev_x));
    CHECK(cudaFree(dev_y));
    CHECK(cudaFree(dev_out));
    CHECK(cudaFree(dev_partial));
    CHECK(cudaFree(h.flush));
    CHECK(cudaEventDestroy(h.start));
    CHECK(cudaEventDestroy(h.stop));
    CHECK(cudaStreamDestroy(h.stream));
    free(host_x);
    free(host_y);
    if (failed) {
        fprintf(stderr, "nvbench_style: %d benchmark(s) with wrong results\n", failed);
        return 1;
    }
    return 0;
}
