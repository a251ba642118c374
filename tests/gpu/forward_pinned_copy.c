/* Event-timed host-to-device copies of page-locked memory, on the driver API
 * (no kernel, no CUDA runtime): a cuMemAllocHost buffer and one of the
 * program's own registered with cuMemHostRegister, each copied --copies times
 * asynchronously on a non-blocking stream between two events, then copied
 * back and compared. Prints one line per kind: `<kind> <median ms> <GB/s>`,
 * then `intact`. Built by tests/gpu/test_gpu_forward_pinned.py and
 * benchmarks/forward_pinned.py with the host compiler against cuda.h.
 *
 *   forward_pinned_copy MIB COPIES
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                         \
    do {                                                                                                    \
        CUresult r_ = (call);                                                                               \
        if (r_ != CUDA_SUCCESS) {                                                                           \
            fprintf(stderr, "%s failed: %d\n", #call, (int)r_);                                             \
            exit(2);                                                                                        \
        }                                                                                                   \
    } while (0)

static int by_value(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float timed(CUdeviceptr d, const unsigned char *host, size_t n, int copies, CUstream s, CUevent a, CUevent b)
{
    float *ms = calloc((size_t)copies, sizeof *ms);
    for (int i = 0; i < copies; i++) {
        CHECK(cuEventRecord(a, s));
        CHECK(cuMemcpyHtoDAsync(d, host, n, s));
        CHECK(cuEventRecord(b, s));
        CHECK(cuEventSynchronize(b));
        CHECK(cuEventElapsedTime(&ms[i], a, b));
    }
    qsort(ms, (size_t)copies, sizeof *ms, by_value);
    float median = ms[copies / 2];
    free(ms);
    return median;
}

int main(int argc, char **argv)
{
    size_t n = (size_t)(argc > 1 ? atoi(argv[1]) : 64) << 20;
    int copies = argc > 2 ? atoi(argv[2]) : 20;
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    unsigned char *pinned, *back, *registered = aligned_alloc(4096, n);
    CHECK(cuMemAllocHost((void **)&pinned, n));
    CHECK(cuMemAllocHost((void **)&back, n));
    CHECK(cuMemHostRegister(registered, n, 0));
    for (size_t i = 0; i < n; i++)
        pinned[i] = registered[i] = (unsigned char)(i * 131u + 7u);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, n));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUevent a, b;
    CHECK(cuEventCreate(&a, 0));
    CHECK(cuEventCreate(&b, 0));
    const char *kinds[] = {"pinned", "registered"};
    const unsigned char *bufs[] = {pinned, registered};
    for (int k = 0; k < 2; k++) {
        timed(d, bufs[k], n, 2, s, a, b); /* warm-up */
        float ms = timed(d, bufs[k], n, copies, s, a, b);
        printf("%s %.4f %.2f\n", kinds[k], ms, ms > 0 ? (double)n / (ms * 1e6) : 0.0);
        CHECK(cuMemcpyDtoHAsync(back, d, n, s));
        CHECK(cuStreamSynchronize(s));
        if (memcmp(back, bufs[k], n) != 0) {
            fprintf(stderr, "%s: the copy back differs\n", kinds[k]);
            return 1;
        }
    }
    CHECK(cuMemHostUnregister(registered));
    printf("intact\n");
    return 0;
}
