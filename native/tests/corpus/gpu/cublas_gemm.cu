// A cuBLAS SGEMM benchmark as people write it: a handle on a non-blocking
// stream, inputs copied in with cudaMemcpy, a warm-up, 20 event-timed
// cublasSgemm calls and their median, then a 256x256 product checked against
// a host reference (exit 1 on a mismatch, 2 on a failed call). Needs NVIDIA's
// cuBLAS, so it is a GPU-only corpus entry (make -C native corpus-gpu):
//
//   nvcc -O2 -cudart shared -o cublas_gemm cublas_gemm.cu -lcublas
//
//   cublas_gemm [N]      N: the timed size (1024 by default)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                         \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) {                                                                            \
            fprintf(stderr, "cublas_gemm: %s failed: %s\n", #call, cudaGetErrorName(e_));                   \
            exit(2);                                                                                        \
        }                                                                                                   \
    } while (0)
#define CHECK_BLAS(call)                                                                                    \
    do {                                                                                                    \
        cublasStatus_t s_ = (call);                                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                  \
            fprintf(stderr, "cublas_gemm: %s failed: status %d\n", #call, (int)s_);                         \
            exit(2);                                                                                        \
        }                                                                                                   \
    } while (0)

#define SAMPLES 20
#define CHECK_N 256

static int by_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// Multiples of 1/8 in [-0.75, 0.75]: every product and every partial sum of
// a 256-term dot product is exact in fp32, so the device and the host agree
// to the bit unless the device computed something else.
static void fill(float *p, int count, int seed)
{
    for (int i = 0; i < count; i++)
        p[i] = (float)((i * 7 + seed) % 13 - 6) / 8.0f;
}

struct operands {
    int n;
    float *a, *b, *c;  // host
    float *da, *db, *dc;  // device
};

static void operands_make(struct operands *o, int n)
{
    size_t bytes = (size_t)n * n * sizeof(float);
    o->n = n;
    o->a = (float *)malloc(bytes);
    o->b = (float *)malloc(bytes);
    o->c = (float *)malloc(bytes);
    if (!o->a || !o->b || !o->c) {
        fprintf(stderr, "cublas_gemm: out of host memory\n");
        exit(2);
    }
    fill(o->a, n * n, 1);
    fill(o->b, n * n, 5);
    CHECK(cudaMalloc((void **)&o->da, bytes));
    CHECK(cudaMalloc((void **)&o->db, bytes));
    CHECK(cudaMalloc((void **)&o->dc, bytes));
    CHECK(cudaMemcpy(o->da, o->a, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(o->db, o->b, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(o->dc, 0, bytes));
}

static void operands_free(struct operands *o)
{
    CHECK(cudaFree(o->da));
    CHECK(cudaFree(o->db));
    CHECK(cudaFree(o->dc));
    free(o->a);
    free(o->b);
    free(o->c);
}

// C = A * B, column-major as BLAS has it.
static void sgemm(cublasHandle_t handle, const struct operands *o)
{
    const float alpha = 1.0f, beta = 0.0f;
    CHECK_BLAS(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, o->n, o->n, o->n, &alpha, o->da, o->n, o->db, o->n,
                           &beta, o->dc, o->n));
}

static int check(cublasHandle_t handle, cudaStream_t stream)
{
    struct operands o;
    operands_make(&o, CHECK_N);
    sgemm(handle, &o);
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaMemcpy(o.c, o.dc, (size_t)CHECK_N * CHECK_N * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int j = 0; j < CHECK_N; j++)
        for (int i = 0; i < CHECK_N; i++) {
            double ref = 0.0;
            for (int k = 0; k < CHECK_N; k++)
                ref += (double)o.a[i + k * CHECK_N] * (double)o.b[k + j * CHECK_N];
            if (fabs((double)o.c[i + j * CHECK_N] - ref) > 1e-3 * (fabs(ref) + 1.0)) {
                if (wrong++ < 4)
                    fprintf(stderr, "cublas_gemm: C[%d,%d] = %g, the host has %g\n", i, j, o.c[i + j * CHECK_N],
                            ref);
            }
        }
    operands_free(&o);
    return wrong;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1024;
    if (n <= 0) {
        fprintf(stderr, "usage: cublas_gemm [N]\n");
        return 2;
    }
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t handle;
    CHECK_BLAS(cublasCreate(&handle));
    CHECK_BLAS(cublasSetStream(handle, stream));

    struct operands o;
    operands_make(&o, n);
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < 3; i++)  // warm-up: cuBLAS picks and loads its kernel on the first call
        sgemm(handle, &o);
    CHECK(cudaStreamSynchronize(stream));
    float ms[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        CHECK(cudaEventRecord(start, stream));
        sgemm(handle, &o);
        CHECK(cudaEventRecord(stop, stream));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaEventElapsedTime(&ms[i], start, stop));
    }
    qsort(ms, SAMPLES, sizeof ms[0], by_float);
    float median = (ms[SAMPLES / 2 - 1] + ms[SAMPLES / 2]) / 2.0f;
    operands_free(&o);

    int wrong = check(handle, stream);
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    CHECK_BLAS(cublasDestroy(handle));
    CHECK(cudaStreamDestroy(stream));
    if (wrong) {
        fprintf(stderr, "cublas_gemm: %d of %d elements wrong\n", wrong, CHECK_N * CHECK_N);
        return 1;
    }
    double tflops = 2.0 * n * n * (double)n / (median * 1e-3) / 1e12;
    printf("cublas_gemm: sgemm %d, median of %d %.3f ms (%.2f TFLOP/s), %dx%d checked\n", n, SAMPLES, median, tflops,
           CHECK_N, CHECK_N);
    return 0;
}
