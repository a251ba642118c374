/* Copies and kernels overlapped on four non-blocking streams, each with its
 * own slice: copy in, kernel, copy out. */
#include "corpus_driver.h"

#define STREAMS 4
#define SLICE (512u << 10)

int main(void)
{
    CUcontext ctx;
    CUfunction k = corpus_setup(&ctx, "scale");
    uint8_t *host = malloc(STREAMS * SLICE), *back = malloc(STREAMS * SLICE);
    corpus_fill(host, STREAMS * SLICE, 11);
    CUdeviceptr d, counter;
    CHECK(cuMemAlloc(&d, STREAMS * SLICE));
    CHECK(cuMemAlloc(&counter, 8));
    CHECK(cuMemsetD8(counter, 0, 8));
    CUstream s[STREAMS];
    for (int i = 0; i < STREAMS; i++) {
        CHECK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
        CHECK(cuMemcpyHtoDAsync(d + i * SLICE, host + i * SLICE, SLICE, s[i]));
        corpus_launch(k, 64, 256, s[i], 5000, counter);
        CHECK(cuMemcpyDtoHAsync(back + i * SLICE, d + i * SLICE, SLICE, s[i]));
    }
    for (int i = 0; i < STREAMS; i++)
        CHECK(cuStreamSynchronize(s[i]));
    EXPECT(memcmp(host, back, STREAMS * SLICE) == 0);
    EXPECT(corpus_read_counter(counter) == STREAMS);
    for (int i = 0; i < STREAMS; i++)
        CHECK(cuStreamDestroy(s[i]));
    printf("multi_stream_copies: %d streams intact\n", STREAMS);
    return 0;
}
