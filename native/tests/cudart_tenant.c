/*
 * A C tenant written against the CUDA runtime (cuda_runtime_api.h) and linked
 * with forwarded mode's libcudart.so.N. It does what nvcc's host code does:
 * before main it registers a fatbinary (a __fatBinC_Wrapper_t around a
 * fatbin header and a simulated module: the simulator loads any image) and
 * its kernel, and it launches the kernel through the two stub forms nvcc
 * generates (CUDA 12: push/pop of the call configuration, cudaLaunchKernel;
 * CUDA 13: __cudaGetKernel, __cudaLaunchKernel).
 *
 *   cudart_tenant work       device queries, kernels counting into device memory,
 *                            copies of every kind (one larger than a ring's chunk),
 *                            memsets, streams, event timings, errors; prints what
 *                            it read back (the same in process and forwarded mode)
 *   cudart_tenant regions N KERNEL_US REPEATS NOISE
 *                            N regions, each timing KERNEL_US kernels REPEATS times
 *                            with events; NOISE kernels queued on another stream
 *                            before each; one JSON line per region (tests/tenants/regions.py's)
 *   cudart_tenant capture    captures kernels, a copy and a memset from a stream into a
 *                            graph, replays it REPLAYS times; prints what it read back
 *   cudart_tenant unknown    calls cudaMallocManaged, which forwarded mode's runtime
 *                            does not implement; exits 3 when it fails
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "krex.h"
#include "nvcc_host_code.h"

/* ---- the launch stubs of nvcc's host code (CUDA 12 and 13; crt/host_runtime.h) ------- */

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                               cudaStream_t stream);

static void **fatbin_handle;

/* The simulated kernel "count" takes (duration ns, counter pointer). */
static void count_stub_cuda12(unsigned long long ns, unsigned long long *counter)
{
    void *args[] = {&ns, &counter};
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    if (__cudaPopCallConfiguration(&grid, &block, &shmem, &stream) != cudaSuccess)
        return;
    (void)cudaLaunchKernel((const void *)count_stub_cuda12, grid, block, args, shmem, stream);
}

static void count_stub_cuda13(unsigned long long ns, unsigned long long *counter)
{
    static cudaKernel_t handle;
    if (handle == NULL)
        __cudaGetKernel(&handle, (const void *)count_stub_cuda13);
    void *args[] = {&ns, &counter};
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    if (__cudaPopCallConfiguration(&grid, &block, &shmem, &stream) != cudaSuccess)
        return;
    (void)__cudaLaunchKernel(handle, grid, block, args, shmem, stream);
}

static void not_registered_stub(void)
{
}

static void unregister(void)
{
    __cudaUnregisterFatBinary(fatbin_handle);
}

__attribute__((constructor)) static void register_device_code(void)
{
    fatbin_handle = __cudaRegisterFatBinary((void *)&fat_device_text);
    /* Two host stubs of one kernel, as two translation units would have. */
    __cudaRegisterFunction(fatbin_handle, (const char *)count_stub_cuda12, (char *)"count", "count", -1, NULL, NULL,
                           NULL, NULL, NULL);
    __cudaRegisterFunction(fatbin_handle, (const char *)count_stub_cuda13, (char *)"count", "count", -1, NULL, NULL,
                           NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(fatbin_handle);
    atexit(unregister);
}

static dim3 d3(unsigned x)
{
    dim3 d = {x, 1, 1};
    return d;
}

/* kernel<<<grid, block, 0, stream>>>(ns, counter), as nvcc writes it */
#define COUNT(stub, grid, block, stream, ns, counter)                                                       \
    (__cudaPushCallConfiguration(d3(grid), d3(block), 0, (struct CUstream_st *)(stream)) ? (void)0          \
                                                                                         : stub(ns, counter))

/* ---- the program ----------------------------------------------------------------- */

#define CHECK(call)                                                                                         \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) {                                                                            \
            fprintf(stderr, "cudart_tenant: %s failed: %s (%s)\n", #call, cudaGetErrorName(e_),             \
                    cudaGetErrorString(e_));                                                                \
            exit(2);                                                                                        \
        }                                                                                                   \
    } while (0)

static int work(void)
{
    int count = 0, dev = -1, runtime = 0;
    CHECK(cudaGetDeviceCount(&count));
    CHECK(cudaSetDevice(0));
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaRuntimeGetVersion(&runtime));
    struct cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("devices %d, device %d, runtime %d, memory %s, a name %s\n", count, dev, runtime,
           prop.totalGlobalMem > 0 ? "yes" : "no", prop.name[0] ? "yes" : "no");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long long *counter;
    CHECK(cudaMalloc((void **)&counter, sizeof *counter));
    CHECK(cudaMemset(counter, 0, sizeof *counter));
    for (int i = 0; i < 10; i++)
        COUNT(count_stub_cuda12, 2, 64, s, 20000ull, counter);
    for (int i = 0; i < 10; i++)
        COUNT(count_stub_cuda13, 2, 64, s, 20000ull, counter);
    void *args[] = {&(unsigned long long){20000}, &counter};
    CHECK(cudaLaunchKernel((const void *)count_stub_cuda12, d3(1), d3(32), args, 0, NULL));
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaDeviceSynchronize());
    unsigned long long counted = 0;
    CHECK(cudaMemcpy(&counted, counter, sizeof counted, cudaMemcpyDeviceToHost));
    printf("kernels counted %llu\n", counted);

    /* 3 MiB: larger than one request's chunk and one reply's staging area */
    size_t n = 3u << 20;
    uint8_t *host, *back;
    CHECK(cudaMallocHost((void **)&host, n));
    back = malloc(n);
    for (size_t i = 0; i < n; i++)
        host[i] = (uint8_t)(i * 131 + 7);
    void *a, *b;
    CHECK(cudaMalloc(&a, n));
    CHECK(cudaMalloc(&b, n));
    CHECK(cudaMemcpy(a, host, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemset((uint8_t *)b + 100, 0x5a, 64));
    CHECK(cudaMemcpyAsync((uint8_t *)a + 4096, host, 4096, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemsetAsync((uint8_t *)b + 8192, 0x11, 32, s));
    CHECK(cudaMemcpyAsync(back, b, n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum = sum * 31 + back[i];
    /* cudaMemcpyDefault: the runtime tells device memory from host memory */
    CHECK(cudaMemcpy(back, (uint8_t *)a + 4096, 4096, cudaMemcpyDefault));
    printf("copies checksum %llx, async copy %s\n", (unsigned long long)sum,
           memcmp(back, host, 4096) == 0 ? "intact" : "differs");

    cudaEvent_t start, end, plain;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreateWithFlags(&end, cudaEventBlockingSync));
    CHECK(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
    CHECK(cudaEventRecord(start, s));
    COUNT(count_stub_cuda13, 1, 32, s, 2000000ull, NULL);
    CHECK(cudaEventRecord(end, s));
    CHECK(cudaEventSynchronize(end));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, end));
    printf("event timing %s\n", ms >= 2.0f && ms < 1000.0f ? "covers the kernel" : "wrong");
    cudaStream_t other;
    CHECK(cudaStreamCreate(&other));
    CHECK(cudaEventRecord(plain, s));
    CHECK(cudaStreamWaitEvent(other, plain, 0));
    CHECK(cudaStreamSynchronize(other));
    printf("event query %s\n", cudaEventQuery(end) == cudaSuccess ? "done" : "pending");

    /* A launch of a function that was never registered: the launch fails and
     * is the last error until read. */
    cudaError_t bad = cudaLaunchKernel((const void *)not_registered_stub, d3(1), d3(1), NULL, 0, NULL);
    cudaError_t peek = cudaPeekAtLastError();
    cudaError_t last = cudaGetLastError();
    printf("unregistered launch: %s, peeked %s, last %s, then %s\n", cudaGetErrorName(bad), cudaGetErrorName(peek),
           cudaGetErrorName(last), cudaGetErrorName(cudaGetLastError()));

    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(end));
    CHECK(cudaEventDestroy(plain));
    CHECK(cudaStreamDestroy(other));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFreeHost(host));
    free(back);
    /* counter and stream s left to the reset */
    CHECK(cudaDeviceReset());
    /* after a reset the kernel is loaded again at its next launch */
    CHECK(cudaMalloc((void **)&counter, sizeof *counter));
    CHECK(cudaMemset(counter, 0, sizeof *counter));
    COUNT(count_stub_cuda12, 1, 1, NULL, 1000ull, counter);
    CHECK(cudaMemcpy(&counted, counter, sizeof counted, cudaMemcpyDeviceToHost));
    printf("after reset counted %llu\n", counted);
    printf("done\n");
    return 0;
}

static int regions(int n, unsigned long long kernel_us, int repeats, int noise)
{
    cudaStream_t s, noise_stream;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamCreateWithFlags(&noise_stream, cudaStreamNonBlocking));
    cudaEvent_t start, end;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&end));
    COUNT(count_stub_cuda12, 1, 32, s, kernel_us * 1000, NULL); /* warm */
    CHECK(cudaStreamSynchronize(s));
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < noise; i++)
            COUNT(count_stub_cuda13, 1, 32, noise_stream, 400000ull, NULL);
        if (krex_region_enter() != 0) {
            printf("{\"region\": %d, \"error\": \"enter\", \"reason\": \"krex_region_enter failed\"}\n", r);
            continue;
        }
        printf("{\"region\": %d, \"times_ms\": [", r);
        for (int i = 0; i < repeats; i++) {
            float ms = 0;
            CHECK(cudaEventRecord(start, s));
            COUNT(count_stub_cuda12, 1, 32, s, kernel_us * 1000, NULL);
            CHECK(cudaEventRecord(end, s));
            CHECK(cudaEventSynchronize(end));
            CHECK(cudaEventElapsedTime(&ms, start, end));
            printf("%s%.4f", i ? ", " : "", ms);
        }
        printf("]}\n");
        fflush(stdout);
        krex_region_exit();
    }
    CHECK(cudaDeviceSynchronize());
    return 0;
}

#define REPLAYS 3

static int capture(void)
{
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long long *counter;
    unsigned char *src, *dst;
    static unsigned char data[8192], back[8192];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 7 + 1);
    CHECK(cudaMalloc((void **)&counter, sizeof *counter));
    CHECK(cudaMalloc((void **)&src, sizeof data));
    CHECK(cudaMalloc((void **)&dst, sizeof data));
    CHECK(cudaMemset(counter, 0, sizeof *counter));
    CHECK(cudaMemset(dst, 0, sizeof data));
    CHECK(cudaMemcpy(src, data, sizeof data, cudaMemcpyHostToDevice));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    enum cudaStreamCaptureStatus status;
    CHECK(cudaStreamIsCapturing(s, &status));
    COUNT(count_stub_cuda12, 2, 64, s, 20000ull, counter);
    CHECK(cudaMemcpyAsync(dst, src, sizeof data, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaMemsetAsync(dst, 0xab, 16, s));
    COUNT(count_stub_cuda13, 2, 64, s, 20000ull, counter);
    CHECK(cudaGetLastError());
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph));
    unsigned long long before = 1;
    CHECK(cudaMemcpy(&before, counter, sizeof before, cudaMemcpyDeviceToHost));
    printf("capturing %s, counted %llu before the replays\n", status == cudaStreamCaptureStatusActive ? "yes" : "no",
           before);
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < REPLAYS; i++)
        CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    unsigned long long after = 0;
    CHECK(cudaMemcpy(&after, counter, sizeof after, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(back, dst, sizeof back, cudaMemcpyDeviceToHost));
    int intact = memcmp(back + 16, data + 16, sizeof data - 16) == 0 && back[0] == 0xab && back[15] == 0xab;
    printf("replayed %d times: counted %llu, copy and memset %s\n", REPLAYS, after, intact ? "intact" : "wrong");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(s));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "capture") == 0)
        return capture();
    if (argc >= 2 && strcmp(argv[1], "work") == 0)
        return work();
    if (argc >= 6 && strcmp(argv[1], "regions") == 0)
        return regions(atoi(argv[2]), strtoull(argv[3], NULL, 10), atoi(argv[4]), atoi(argv[5]));
    if (argc >= 2 && strcmp(argv[1], "unknown") == 0) {
        CHECK(cudaSetDevice(0));
        void *p = NULL;
        cudaError_t e = cudaMallocManaged(&p, 4096, cudaMemAttachGlobal);
        printf("cudaMallocManaged: %s\n", cudaGetErrorName(e));
        return e == cudaSuccess ? 0 : 3;
    }
    fprintf(stderr, "usage: cudart_tenant work | regions N KERNEL_US REPEATS NOISE | capture | unknown\n");
    return 2;
}
