/* The region API from C (krex.h): a timed loop inside a region, medians of
 * event timings, the region's integrity asked before it is released. */
#include "corpus_driver.h"
#include "krex.h"

int main(void)
{
    CUcontext ctx;
    CUfunction k = corpus_setup(&ctx, "sgemm");
    CUdeviceptr counter;
    CHECK(cuMemAlloc(&counter, 8));
    CHECK(cuMemsetD8(counter, 0, 8));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUevent a, b;
    CHECK(cuEventCreate(&a, 0));
    CHECK(cuEventCreate(&b, 0));
    corpus_launch(k, 132, 256, s, 10000, counter); /* warm-up */
    CHECK(cuStreamSynchronize(s));
    EXPECT(krex_region_enter() == 0);
    float ms[5];
    for (int i = 0; i < 5; i++) {
        CHECK(cuEventRecord(a, s));
        corpus_launch(k, 132, 256, s, 100000, counter);
        CHECK(cuEventRecord(b, s));
        CHECK(cuEventSynchronize(b));
        CHECK(cuEventElapsedTime(&ms[i], a, b));
        EXPECT(ms[i] >= 0.09f);
    }
    char integrity[128];
    int n = krex_region_integrity(integrity, sizeof integrity);
    EXPECT(krex_region_exit() == 0);
    EXPECT(corpus_read_counter(counter) == 6);
    printf("region_timing: 5 timings, integrity %s\n", n > 0 ? integrity : "n/a");
    return 0;
}
