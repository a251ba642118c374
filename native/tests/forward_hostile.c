/*
 * Hostile forwarded commands: what one tenant tries against its context
 * server, through the forwarding client (linked with -lcuda) and its own
 * segment (KREX_FORWARD_RING). tests/hostile/test_forward_attacks.py runs
 * them, as tenants of distinct uids where the attack needs two.
 *
 *   forward_hostile plant SIZE      two allocations of SIZE bytes: padding, then
 *                                   a secret; prints "uid UID", "planted ADDR" (the
 *                                   secret's) and exits without freeing either
 *   forward_hostile steal ADDR SIZE tries to read the secret another command left
 *                                   at ADDR: at its address before allocating,
 *                                   a memset there, past the end of its own first
 *                                   allocation, a device-to-device copy from it,
 *                                   what its next allocation holds, a kernel whose
 *                                   counter points there; "uid UID", then one line
 *                                   per attempt: "NAME RESULT LEAKED"
 *   forward_hostile context SIZE    a context of its own, a secret allocated in it
 *                                   and a stream, then the context destroyed;
 *                                   prints "uid UID", what the stream and the memory
 *                                   answer after ("NAME RESULT") and "planted ADDR"
 *   forward_hostile handles         handles the server never gave (a stream, an
 *                                   event, a module, a function, a pointer to free);
 *                                   one line per call: "NAME RESULT"
 *   forward_hostile fault           a kernel whose counter is no device memory,
 *                                   then cuCtxSynchronize; prints its result
 *   forward_hostile grow            grows its segment by 64 KiB and claims a staging
 *                                   area 64 KiB larger in the header before the
 *                                   client attaches, then copies that much to the
 *                                   host; prints "copy RESULT"
 *   forward_hostile shrink          truncates its segment to nothing while its
 *                                   server serves it, then exits
 */
#include <cuda.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "krex_forward.h"

#define SECRET "KREX-SECRET-PLANTED!"
#define WILD 0x1000ull /* an address and a handle no one gave out */

#define CHECK(call)                                                                                         \
    do {                                                                                                    \
        CUresult r_ = (call);                                                                               \
        if (r_ != CUDA_SUCCESS) {                                                                           \
            fprintf(stderr, "forward_hostile: %s failed: %d\n", #call, (int)r_);                            \
            exit(2);                                                                                        \
        }                                                                                                   \
    } while (0)

/* cuda.h 13 names cuCtxCreate_v4; forwarded mode forwards the driver's _v2. */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

static CUfunction kernel;
static CUdevice device;
static CUcontext primary;

/* The kernel `count(ns, counter)`: on the simulated driver (whose modules are
 * any image) it runs ns nanoseconds and adds one to *counter; on a GPU this
 * PTX adds one to *counter (unless it is 0), so the same program attacks
 * both (tests/gpu/test_gpu_forward_attacks.py). */
static const char module_image[] = ".version 7.0\n"
                                   ".target sm_75\n"
                                   ".address_size 64\n"
                                   ".visible .entry count(.param .u64 ns, .param .u64 counter)\n"
                                   "{\n"
                                   "    .reg .pred %p<2>;\n"
                                   "    .reg .b64 %rd<4>;\n"
                                   "    ld.param.u64 %rd1, [counter];\n"
                                   "    setp.eq.s64 %p1, %rd1, 0;\n"
                                   "    @%p1 bra $done;\n"
                                   "    cvta.to.global.u64 %rd2, %rd1;\n"
                                   "    atom.global.add.u64 %rd3, [%rd2], 1;\n"
                                   "$done:\n"
                                   "    ret;\n"
                                   "}\n";

static void start(void)
{
    CUmodule mod;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&device, 0));
    CHECK(cuDevicePrimaryCtxRetain(&primary, device));
    CHECK(cuCtxSetCurrent(primary));
    CHECK(cuModuleLoadData(&mod, module_image));
    CHECK(cuModuleGetFunction(&kernel, mod, "count"));
}

static int leaked(const uint8_t *buf, size_t n)
{
    return memmem(buf, n, SECRET, strlen(SECRET)) != NULL;
}

static void fill_secret(CUdeviceptr at, size_t size)
{
    uint8_t *fill = malloc(size);
    for (size_t i = 0; i < size; i++)
        fill[i] = (uint8_t)SECRET[i % strlen(SECRET)];
    CHECK(cuMemcpyHtoD(at, fill, size));
    free(fill);
}

static int plant(size_t size)
{
    printf("uid %d\n", (int)getuid());
    start();
    CUdeviceptr pad, secret;
    CHECK(cuMemAlloc(&pad, size));
    CHECK(cuMemsetD8(pad, 'p', size));
    CHECK(cuMemAlloc(&secret, size));
    fill_secret(secret, size);
    CHECK(cuCtxSynchronize());
    printf("planted %llu\n", (unsigned long long)secret);
    return 0; /* nothing freed: the server cleans up after us */
}

static int context(size_t size)
{
    printf("uid %d\n", (int)getuid());
    start();
    CUcontext own;
    CUdeviceptr secret;
    CUstream s;
    uint8_t buf[16];
    CHECK(cuCtxCreate_v2(&own, 0, device));
    CHECK(cuMemAlloc(&secret, size));
    fill_secret(secret, size);
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxDestroy(own));
    CHECK(cuCtxSetCurrent(primary));
    printf("stream-after %d\n", (int)cuStreamSynchronize(s));
    printf("memory-after %d\n", (int)cuMemcpyDtoH(buf, secret, sizeof buf));
    printf("planted %llu\n", (unsigned long long)secret);
    return 0;
}

static void report(const char *name, CUresult r, const uint8_t *buf, size_t n)
{
    printf("%s %d %d\n", name, (int)r, r == CUDA_SUCCESS && buf != NULL ? leaked(buf, n) : 0);
}

static int steal(CUdeviceptr at, size_t size)
{
    printf("uid %d\n", (int)getuid());
    start();
    uint8_t *buf = calloc(1, size);
    CUresult r = cuMemcpyDtoH(buf, at, size);
    report("at-address", r, buf, size);
    r = cuMemsetD8(at, 'x', 16);
    report("memset-there", r, NULL, 0);

    CUdeviceptr own, next;
    CHECK(cuMemAlloc(&own, size));
    memset(buf, 0, size);
    r = cuMemcpyDtoH(buf, own + size, size);
    report("past-own-end", r, buf, size);
    r = cuMemcpyDtoD(own, at, size);
    memset(buf, 0, size);
    if (r == CUDA_SUCCESS)
        CHECK(cuMemcpyDtoH(buf, own, size));
    report("device-copy", r, buf, size);

    CHECK(cuMemAlloc(&next, size));
    memset(buf, 0, size);
    r = cuMemcpyDtoH(buf, next, size);
    report("next-allocation", r, buf, size);

    /* A kernel's arguments are values: which of them are pointers only its
     * code knows. The simulated one increments its counter. */
    unsigned long long ns = 1000;
    CUdeviceptr counter = at + 4 * size;
    void *params[] = {&ns, &counter};
    r = cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
    if (r == CUDA_SUCCESS)
        r = cuCtxSynchronize();
    report("kernel-argument", r, NULL, 0);
    free(buf);
    return 0;
}

static int handles(void)
{
    start();
    CUstream s = (CUstream)(uintptr_t)WILD;
    CUevent e = (CUevent)(uintptr_t)WILD;
    CUmodule m = (CUmodule)(uintptr_t)WILD;
    CUfunction f = (CUfunction)(uintptr_t)WILD;
    CUfunction got;
    int value;
    float ms;
    unsigned long long ns = 1000;
    CUdeviceptr none = 0;
    void *params[] = {&ns, &none};
    printf("stream-synchronize %d\n", (int)cuStreamSynchronize(s));
    printf("stream-query %d\n", (int)cuStreamQuery(s));
    printf("event-synchronize %d\n", (int)cuEventSynchronize(e));
    printf("event-elapsed %d\n", (int)cuEventElapsedTime(&ms, e, e));
    printf("module-function %d\n", (int)cuModuleGetFunction(&got, m, "count"));
    printf("function-attribute %d\n", (int)cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    printf("launch %d\n", (int)cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    printf("free %d\n", (int)cuMemFree((CUdeviceptr)WILD));
    printf("stream-destroy %d\n", (int)cuStreamDestroy(s));
    printf("event-destroy %d\n", (int)cuEventDestroy(e));
    printf("module-unload %d\n", (int)cuModuleUnload(m));
    /* Sent without waiting: the next call that waits (and succeeds) says it. */
    printf("launch-on-stream %d\n", (int)cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    printf("synchronize %d\n", (int)cuCtxSynchronize());
    return 0;
}

static int fault(void)
{
    start();
    unsigned long long ns = 1000;
    CUdeviceptr counter = WILD;
    void *params[] = {&ns, &counter};
    CHECK(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    printf("synchronize %d\n", (int)cuCtxSynchronize());
    return 0;
}

/* The segment, opened by its path as the client does. */
static int segment(off_t *size)
{
    const char *path = getenv(KREX_FWD_ENV_RING);
    struct stat st;
    int fd = path != NULL ? open(path, O_RDWR) : -1;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "forward_hostile: no segment\n");
        exit(2);
    }
    *size = st.st_size;
    return fd;
}

static int grow(void)
{
    off_t size;
    int fd = segment(&size);
    uint64_t staging;
    if (pread(fd, &staging, sizeof staging, offsetof(struct krex_fwd_header, staging_size)) != sizeof staging)
        return 2;
    staging += 64 * 1024;
    if (ftruncate(fd, size + 64 * 1024) != 0 ||
        pwrite(fd, &staging, sizeof staging, offsetof(struct krex_fwd_header, staging_size)) != sizeof staging)
        return 2;
    close(fd);
    start(); /* the client attaches now, and believes the header */
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, staging));
    uint8_t *buf = malloc(staging);
    printf("copy %d\n", (int)cuMemcpyDtoH(buf, d, staging));
    free(buf);
    return 0;
}

static int shrink(void)
{
    start();
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 64)); /* the server serves us */
    off_t size;
    int fd = segment(&size);
    if (ftruncate(fd, 0) != 0)
        return 2;
    printf("truncated %lld bytes\n", (long long)size);
    fflush(stdout);
    usleep(300 * 1000); /* the server looks at its segment meanwhile */
    _exit(0);           /* the client would touch the segment at exit */
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "plant") == 0 && argc == 3)
        return plant(strtoull(argv[2], NULL, 0));
    if (strcmp(what, "steal") == 0 && argc == 4)
        return steal(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
    if (strcmp(what, "context") == 0 && argc == 3)
        return context(strtoull(argv[2], NULL, 0));
    if (strcmp(what, "handles") == 0)
        return handles();
    if (strcmp(what, "fault") == 0)
        return fault();
    if (strcmp(what, "grow") == 0)
        return grow();
    if (strcmp(what, "shrink") == 0)
        return shrink();
    fprintf(stderr, "usage: forward_hostile plant SIZE | steal ADDR SIZE | context SIZE | handles | fault | grow | shrink\n");
    return 2;
}
