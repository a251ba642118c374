/*
 * A C tenant that forwarded mode must run exactly as process mode does,
 * linked with -lcuda (the simulated driver, or forwarded mode's client):
 *
 *   forward_tenant work        kernels counting into device memory, copies both
 *                              ways (one larger than a ring's chunk), memsets,
 *                              device-to-device copies, event timings, a module
 *                              loaded from a file; prints what it read back
 *   forward_tenant wait MS     a kernel of MS milliseconds, then cuCtxSynchronize
 *                              (prints "waiting" first: a test kills a side meanwhile)
 *   forward_tenant unknown     calls cuMemAllocManaged, which forwarded mode does
 *                              not forward; exits 3 when it fails
 *   forward_tenant capture     (forwarded mode only) what the server refuses of a
 *                              stream capture: a copy from the program's memory
 *                              captured, graph handles it never gave; then leaves
 *                              a capture open at exit, which the server ends
 *   forward_tenant export-table
 *                              asks for the driver's private tables, as a CUDA
 *                              runtime linked into the program does first; exits 3
 *                              when it gets none
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                                         \
    do {                                                                                                    \
        CUresult r_ = (call);                                                                               \
        if (r_ != CUDA_SUCCESS) {                                                                           \
            const char *name_ = NULL;                                                                       \
            cuGetErrorName(r_, &name_);                                                                     \
            fprintf(stderr, "forward_tenant: %s failed: %s\n", #call, name_ ? name_ : "?");                 \
            exit(2);                                                                                        \
        }                                                                                                   \
    } while (0)

static CUfunction kernel;

static void launch(unsigned long long ns, CUdeviceptr counter, CUstream s)
{
    void *params[] = {&ns, &counter};
    CHECK(cuLaunchKernel(kernel, 2, 1, 1, 64, 1, 1, 0, s, params, NULL));
}

static int work(void)
{
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr counter;
    CHECK(cuMemAlloc_v2(&counter, sizeof(uint64_t)));
    CHECK(cuMemsetD8_v2(counter, 0, sizeof(uint64_t)));
    for (int i = 0; i < 25; i++)
        launch(20000, counter, s);
    /* the same through the packed `extra` form */
    struct {
        uint64_t ns;
        CUdeviceptr counter;
    } packed = {20000, counter};
    size_t size = sizeof packed;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    CHECK(cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, s, NULL, extra));
    CHECK(cuStreamSynchronize(s));
    uint64_t count = 0;
    CHECK(cuMemcpyDtoH_v2(&count, counter, sizeof count));
    printf("kernels counted %llu\n", (unsigned long long)count);

    /* 3 MiB: larger than one request's chunk and one reply's staging area */
    size_t n = 3u << 20;
    uint8_t *host = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        host[i] = (uint8_t)(i * 131 + 7);
    CUdeviceptr a, b;
    CHECK(cuMemAlloc_v2(&a, n));
    CHECK(cuMemAlloc_v2(&b, n));
    CHECK(cuMemcpyHtoD_v2(a, host, n));
    CHECK(cuMemcpyDtoD_v2(b, a, n));
    CHECK(cuMemsetD32_v2(b, 0x01020304u, 16));
    CHECK(cuMemcpyHtoDAsync_v2(a + 4096, host, 4096, s));
    CHECK(cuMemcpyDtoHAsync_v2(back, b, n, s));
    CHECK(cuStreamSynchronize(s));
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum = sum * 31 + back[i];
    CHECK(cuMemcpyDtoH_v2(back, a + 4096, 4096));
    printf("copies checksum %llx, async copy %s\n", (unsigned long long)sum,
           memcmp(back, host, 4096) == 0 ? "intact" : "differs");

    CUevent start, end;
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));
    CHECK(cuEventRecord(start, s));
    launch(2000000, 0, s);
    CHECK(cuEventRecord(end, s));
    CHECK(cuEventSynchronize(end));
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, start, end));
    printf("event timing %s\n", ms >= 2.0f && ms < 1000.0f ? "covers the kernel" : "wrong");
    CHECK(cuEventDestroy_v2(start));
    CHECK(cuEventDestroy_v2(end));

    size_t free_b, total;
    CHECK(cuMemGetInfo_v2(&free_b, &total));
    char name[64];
    CHECK(cuDeviceGetName(name, sizeof name, 0));
    printf("device has memory %s, a name %s\n", total > 0 ? "yes" : "no", name[0] ? "yes" : "no");
    CHECK(cuMemFree_v2(a));
    CHECK(cuMemFree_v2(b));
    /* counter and stream left for the context's cleanup */
    free(host);
    free(back);
    printf("done\n");
    return 0;
}

static const char *error_name(CUresult r)
{
    const char *name = NULL;
    cuGetErrorName(r, &name);
    return name ? name : "?";
}

static int capture(void)
{
    CUstream s, open_at_exit;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&open_at_exit, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, 4096));
    static unsigned char host[4096];
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    launch(1000, d, s);
    CUresult copy = cuMemcpyHtoDAsync_v2(d, host, sizeof host, s);
    CUgraph g = NULL;
    CUresult end = cuStreamEndCapture(s, &g);
    printf("a host copy captured: %s, the capture ends: %s, graph %s\n", error_name(copy), error_name(end),
           g == NULL ? "none" : "made");
    CUgraphExec exec;
    printf("instantiate a graph not given: %s\n", error_name(cuGraphInstantiateWithFlags(&exec, (CUgraph)d, 0)));
    printf("destroy an executable graph not given: %s\n", error_name(cuGraphExecDestroy((CUgraphExec)d)));
    CUresult sent = cuGraphLaunch((CUgraphExec)d, s);
    printf("launch one: %s, then %s\n", error_name(sent), error_name(cuStreamSynchronize(s)));
    CHECK(cuStreamBeginCapture_v2(open_at_exit, CU_STREAM_CAPTURE_MODE_GLOBAL));
    launch(1000, d, open_at_exit);
    printf("done\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: forward_tenant work|wait MS|capture|unknown|export-table\n");
        return 2;
    }
    CHECK(cuInit(0));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    char path[] = "/tmp/forward_tenant_module_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, "simulated module\n", 17) != 17)
        return 2;
    close(fd);
    CUmodule mod;
    CHECK(cuModuleLoad(&mod, path));
    unlink(path);
    CHECK(cuModuleGetFunction(&kernel, mod, "count"));
    if (strcmp(argv[1], "work") == 0)
        return work();
    if (strcmp(argv[1], "capture") == 0)
        return capture();
    if (strcmp(argv[1], "wait") == 0 && argc > 2) {
        launch(strtoull(argv[2], NULL, 10) * 1000000ull, 0, NULL);
        printf("waiting\n");
        fflush(stdout);
        CUresult r = cuCtxSynchronize();
        const char *name = NULL;
        cuGetErrorName(r, &name);
        printf("synchronised: %s\n", name ? name : "?");
        return r == CUDA_SUCCESS ? 0 : 4;
    }
    if (strcmp(argv[1], "export-table") == 0) {
        /* Any table's id: the forwarding client has none to give. */
        static const CUuuid table = {{(char)0x6b, (char)0xd5, (char)0xfb, (char)0x6c, (char)0x5b, (char)0xf4,
                                      (char)0xe7, (char)0x4a, (char)0x89, (char)0x87, (char)0xd9, (char)0x39,
                                      (char)0x12, (char)0xfd, (char)0x9d, (char)0xf9}};
        const void *p = NULL;
        CUresult r = cuGetExportTable(&p, &table);
        printf("cuGetExportTable: %d\n", (int)r);
        return r == CUDA_SUCCESS ? 0 : 3;
    }
    if (strcmp(argv[1], "unknown") == 0) {
        CUdeviceptr p;
        CUresult r = cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_GLOBAL);
        printf("cuMemAllocManaged: %d\n", (int)r);
        return r == CUDA_SUCCESS ? 0 : 3;
    }
    return 2;
}
