// The GEMM of forward_gemm.cu as a CUDA runtime program, the way most native
// benchmarks are written (cudaMalloc, cudaMemcpy, kernel<<<>>>, cudaEvent
// timing), for forwarded mode's benchmark (benchmarks/forward_gemm.py --cudart):
//
//   nvcc -cudart shared -arch=sm_90 -I native/include -o forward_gemm_cudart forward_gemm_cudart.cu
//        -L native/build -l:libkrex.so -Xlinker -rpath,native/build -Xlinker -rpath,$CUDA/lib64   (one line)
//
//   forward_gemm_cudart N SAMPLES [region]
//
// Built with the shared CUDA runtime: in process mode it loads the toolkit's
// libcudart.so.N, in forwarded mode forwarded mode's (first on its library
// path). Prints the same JSON line as forward_gemm.cu: wall-clock times of
// main's start and of the end of the first kernel, then SAMPLES single-shot
// timings and SAMPLES medians of ten, in milliseconds. With `region` the timing
// runs inside a KREX region. The kernel and its launch are nvcc's; the rest is
// host C++ (g++ -x c++ -fsyntax-only checks it where nvcc is absent).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <sys/time.h>
#include <vector>

#include "krex.h"

#ifdef __CUDACC__
__global__ void gemm(const float *a, const float *b, float *c, int n)
{
    __shared__ float ta[16][16], tb[16][16];
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += 16) {
        ta[threadIdx.y][threadIdx.x] = (row < n && k0 + threadIdx.x < n) ? a[row * n + k0 + threadIdx.x] : 0.0f;
        tb[threadIdx.y][threadIdx.x] = (col < n && k0 + threadIdx.y < n) ? b[(k0 + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < 16; k++)
            acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n)
        c[row * n + col] = acc;
}
#endif

// gemm<<<grid, block>>>: nvcc's host code pushes the configuration and calls
// the kernel's stub, which launches through the CUDA runtime.
static void launch_gemm(dim3 grid, dim3 block, const float *a, const float *b, float *c, int n)
{
#ifdef __CUDACC__
    gemm<<<grid, block>>>(a, b, c, n);
#else
    (void)grid, (void)block, (void)a, (void)b, (void)c, (void)n;
#endif
}

static double wall()
{
    timeval tv;
    gettimeofday(&tv, nullptr);
    return tv.tv_sec + tv.tv_usec / 1e6;
}

#define CHECK(call)                                                                                   \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            fprintf(stderr, "forward_gemm_cudart: %s failed: %s\n", #call, cudaGetErrorName(e_));     \
            return 2;                                                                                 \
        }                                                                                             \
    } while (0)

int main(int argc, char **argv)
{
    double start = wall();
    if (argc < 3) {
        fprintf(stderr, "usage: forward_gemm_cudart N SAMPLES [region]\n");
        return 2;
    }
    int n = atoi(argv[1]), samples = atoi(argv[2]);
    bool in_region = argc > 3 && strcmp(argv[3], "region") == 0;
    size_t bytes = (size_t)n * n * sizeof(float);
    std::vector<float> host((size_t)n * n);
    for (size_t i = 0; i < host.size(); i++)
        host[i] = (float)((i * 7) % 13) / 13.0f;
    float *a, *b, *c;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMalloc(&c, bytes));
    CHECK(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice));
    dim3 grid((n + 15) / 16, (n + 15) / 16), block(16, 16);
    launch_gemm(grid, block, a, b, c, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    double first_kernel = wall();
    float check = 0;
    CHECK(cudaMemcpy(&check, c, sizeof check, cudaMemcpyDeviceToHost));

    cudaEvent_t ev[11];
    for (auto &e : ev)
        CHECK(cudaEventCreate(&e));
    std::vector<float> single, median10;
    if (in_region && krex_region_enter() != 0)
        fprintf(stderr, "forward_gemm_cudart: no region: %s\n", "krex_region_enter failed");
    for (int s = 0; s < samples; s++) {
        float ms = 0;
        CHECK(cudaEventRecord(ev[0]));
        launch_gemm(grid, block, a, b, c, n);
        CHECK(cudaEventRecord(ev[1]));
        CHECK(cudaEventSynchronize(ev[1]));
        CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
        single.push_back(ms);
        std::vector<float> ten;
        CHECK(cudaEventRecord(ev[0]));
        for (int i = 0; i < 10; i++) {
            launch_gemm(grid, block, a, b, c, n);
            CHECK(cudaEventRecord(ev[i + 1]));
        }
        CHECK(cudaEventSynchronize(ev[10]));
        for (int i = 0; i < 10; i++) {
            CHECK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
            ten.push_back(ms);
        }
        std::nth_element(ten.begin(), ten.begin() + 5, ten.end());
        median10.push_back(ten[5]);
    }
    if (in_region)
        krex_region_exit();
    CHECK(cudaGetLastError());
    printf("{\"start\": %.6f, \"first_kernel\": %.6f, \"check\": %.3f, \"single_ms\": [", start, first_kernel, check);
    for (int s = 0; s < samples; s++)
        printf("%s%.5f", s ? ", " : "", single[s]);
    printf("], \"median10_ms\": [");
    for (int s = 0; s < samples; s++)
        printf("%s%.5f", s ? ", " : "", median10[s]);
    printf("]}\n");
    return 0;
}
