/* The native benchmark, on the CUDA runtime as nvcc's host code
 * calls it (-cudart shared): device properties, an occupancy query for the
 * grid, saxpy-like launches timed with events as a median of 20, a pinned
 * host-to-device copy on a non-blocking stream, a registered buffer. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nvcc_host_code.h"

static void **fatbin_handle;

static void saxpy_stub(void)
{
}

static void unregister(void)
{
    __cudaUnregisterFatBinary(fatbin_handle);
}

__attribute__((constructor)) static void register_device_code(void)
{
    fatbin_handle = __cudaRegisterFatBinary((void *)&fat_device_text);
    __cudaRegisterFunction(fatbin_handle, (const char *)saxpy_stub, (char *)"saxpy", "saxpy", -1, NULL, NULL, NULL,
                           NULL, NULL);
    __cudaRegisterFatBinaryEnd(fatbin_handle);
    atexit(unregister);
}

#define CHECK(call)                                                                                         \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) {                                                                            \
            fprintf(stderr, "runtime_benchmark: %s failed: %s\n", #call, cudaGetErrorName(e_));             \
            exit(2);                                                                                        \
        }                                                                                                   \
    } while (0)
#define EXPECT(cond)                                                                                        \
    do {                                                                                                    \
        if (!(cond)) {                                                                                      \
            fprintf(stderr, "runtime_benchmark:%d: mismatch: %s\n", __LINE__, #cond);                       \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

static int by_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define N (1u << 20)

int main(void)
{
    struct cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    EXPECT(prop.multiProcessorCount > 0 && prop.warpSize == 32);
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, (const void *)saxpy_stub, 256, 0, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (const void *)saxpy_stub, 256, 0));
    EXPECT(blocks >= 1);
    unsigned grid = (unsigned)(blocks * prop.multiProcessorCount);

    unsigned long long *counter;
    CHECK(cudaMalloc((void **)&counter, 8));
    CHECK(cudaMemset(counter, 0, 8));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    float ms[20];
    unsigned long long ns = 50000;
    void *args[] = {&ns, &counter};
    dim3 g = {grid, 1, 1}, blk = {256, 1, 1};
    for (int i = 0; i < 20; i++) {
        CHECK(cudaEventRecord(a, s));
        CHECK(cudaLaunchKernel((const void *)saxpy_stub, g, blk, args, 0, s));
        CHECK(cudaEventRecord(b, s));
        CHECK(cudaEventSynchronize(b));
        CHECK(cudaEventElapsedTime(&ms[i], a, b));
    }
    qsort(ms, 20, sizeof ms[0], by_float);
    EXPECT(ms[10] >= 0.045f);

    uint8_t *pinned, *back = malloc(N);
    CHECK(cudaMallocHost((void **)&pinned, N));
    for (unsigned i = 0; i < N; i++)
        pinned[i] = (uint8_t)(i * 7u);
    CHECK(cudaHostRegister(back, N, cudaHostRegisterDefault));
    uint8_t *d;
    CHECK(cudaMalloc((void **)&d, N));
    CHECK(cudaMemcpyAsync(d, pinned, N, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(back, d, N, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(memcmp(pinned, back, N) == 0);
    CHECK(cudaHostUnregister(back));
    CHECK(cudaFreeHost(pinned));
    unsigned long long count = 0;
    CHECK(cudaMemcpy(&count, counter, 8, cudaMemcpyDeviceToHost));
    EXPECT(count == 20);
    printf("runtime_benchmark: grid %u, median %.3f ms, copy intact\n", grid, ms[10]);
    return 0;
}
