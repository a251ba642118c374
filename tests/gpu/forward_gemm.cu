// A small GEMM timed with CUDA events, through the driver API, for forwarded
// mode's benchmark (benchmarks/forward_gemm.py builds and runs it):
//
//   nvcc -cubin -arch=sm_90 -DFORWARD_GEMM_KERNEL -o forward_gemm.cubin forward_gemm.cu   (the kernel)
//   c++ -x c++ -o forward_gemm forward_gemm.cu -I$CUDA/include -I native/include -L native/build -lkrex -lcuda
//                                                                                         (the program)
//
//   forward_gemm CUBIN N SAMPLES [region]
//
// Prints one JSON line: wall-clock times of main's start and of the end of the
// first kernel (start-to-first-kernel), then SAMPLES single-shot timings (one
// kernel between two events, read at once) and SAMPLES medians of ten (ten
// kernels each between its own events), in milliseconds. With `region` the
// timing runs inside a KREX region (krex_region_enter/exit; a no-op without a
// runtime). The program has no CUDA runtime (-cudart none): every call is a
// driver call, so in forwarded mode every one of them is forwarded.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <sys/time.h>
#include <vector>

#include "krex.h"

#ifdef FORWARD_GEMM_KERNEL
extern "C" __global__ void gemm(const float *a, const float *b, float *c, int n)
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

#else
static double wall()
{
    timeval tv;
    gettimeofday(&tv, nullptr);
    return tv.tv_sec + tv.tv_usec / 1e6;
}

#define CHECK(call)                                                                                   \
    do {                                                                                              \
        CUresult r_ = (call);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                     \
            const char *s_ = nullptr;                                                                 \
            cuGetErrorName(r_, &s_);                                                                  \
            fprintf(stderr, "forward_gemm: %s failed: %s\n", #call, s_ ? s_ : "?");                   \
            return 2;                                                                                 \
        }                                                                                             \
    } while (0)

int main(int argc, char **argv)
{
    double start = wall();
    if (argc < 4) {
        fprintf(stderr, "usage: forward_gemm CUBIN N SAMPLES [region]\n");
        return 2;
    }
    int n = atoi(argv[2]), samples = atoi(argv[3]);
    bool in_region = argc > 4 && strcmp(argv[4], "region") == 0;
    CHECK(cuInit(0));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUmodule mod;
    CHECK(cuModuleLoad(&mod, argv[1]));
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, mod, "gemm"));
    size_t bytes = (size_t)n * n * sizeof(float);
    std::vector<float> host((size_t)n * n);
    for (size_t i = 0; i < host.size(); i++)
        host[i] = (float)((i * 7) % 13) / 13.0f;
    CUdeviceptr a, b, c;
    CHECK(cuMemAlloc(&a, bytes));
    CHECK(cuMemAlloc(&b, bytes));
    CHECK(cuMemAlloc(&c, bytes));
    CHECK(cuMemcpyHtoD(a, host.data(), bytes));
    CHECK(cuMemcpyHtoD(b, host.data(), bytes));
    void *params[] = {&a, &b, &c, &n};
    unsigned grid = (unsigned)(n + 15) / 16;
    CHECK(cuLaunchKernel(f, grid, grid, 1, 16, 16, 1, 0, nullptr, params, nullptr));
    CHECK(cuCtxSynchronize());
    double first_kernel = wall();
    float check = 0;
    CHECK(cuMemcpyDtoH(&check, c, sizeof check));

    CUevent ev[11];
    for (auto &e : ev)
        CHECK(cuEventCreate(&e, CU_EVENT_DEFAULT));
    std::vector<float> single, median10;
    if (in_region && krex_region_enter() != 0)
        fprintf(stderr, "forward_gemm: no region: %s\n", "krex_region_enter failed");
    for (int s = 0; s < samples; s++) {
        float ms = 0;
        CHECK(cuEventRecord(ev[0], nullptr));
        CHECK(cuLaunchKernel(f, grid, grid, 1, 16, 16, 1, 0, nullptr, params, nullptr));
        CHECK(cuEventRecord(ev[1], nullptr));
        CHECK(cuEventSynchronize(ev[1]));
        CHECK(cuEventElapsedTime(&ms, ev[0], ev[1]));
        single.push_back(ms);
        std::vector<float> ten;
        CHECK(cuEventRecord(ev[0], nullptr));
        for (int i = 0; i < 10; i++) {
            CHECK(cuLaunchKernel(f, grid, grid, 1, 16, 16, 1, 0, nullptr, params, nullptr));
            CHECK(cuEventRecord(ev[i + 1], nullptr));
        }
        CHECK(cuEventSynchronize(ev[10]));
        for (int i = 0; i < 10; i++) {
            CHECK(cuEventElapsedTime(&ms, ev[i], ev[i + 1]));
            ten.push_back(ms);
        }
        std::nth_element(ten.begin(), ten.begin() + 5, ten.end());
        median10.push_back(ten[5]);
    }
    if (in_region)
        krex_region_exit();
    printf("{\"start\": %.6f, \"first_kernel\": %.6f, \"check\": %.3f, \"single_ms\": [", start, first_kernel, check);
    for (int s = 0; s < samples; s++)
        printf("%s%.5f", s ? ", " : "", single[s]);
    printf("], \"median10_ms\": [");
    for (int s = 0; s < samples; s++)
        printf("%s%.5f", s ? ", " : "", median10[s]);
    printf("]}\n");
    return 0;
}
#endif
