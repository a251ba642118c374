/* The pinned host-to-device copy of a bandwidth benchmark: cuMemAllocHost
 * buffers, asynchronous copies both ways on a non-blocking stream, timed
 * with events as a median of 20. */
#include "corpus_driver.h"

#define N (1u << 20)

int main(void)
{
    CUcontext ctx;
    corpus_setup(&ctx, "unused");
    uint8_t *host, *back;
    CHECK(cuMemAllocHost((void **)&host, N));
    CHECK(cuMemHostAlloc((void **)&back, N, CU_MEMHOSTALLOC_PORTABLE));
    corpus_fill(host, N, 7);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUevent a, b;
    CHECK(cuEventCreate(&a, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&b, CU_EVENT_DEFAULT));
    float ms[20];
    for (int i = 0; i < 20; i++) {
        CHECK(cuEventRecord(a, s));
        CHECK(cuMemcpyHtoDAsync(d, host, N, s));
        CHECK(cuEventRecord(b, s));
        CHECK(cuEventSynchronize(b));
        CHECK(cuEventElapsedTime(&ms[i], a, b));
        EXPECT(ms[i] >= 0.0f);
    }
    CHECK(cuMemcpyDtoHAsync(back, d, N, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(memcmp(host, back, N) == 0);
    CHECK(cuMemFreeHost(host));
    CHECK(cuMemFreeHost(back));
    printf("pinned_copy: 20 timed copies of %u bytes, intact\n", N);
    return 0;
}
