/* A graph captured from a stream (two kernels, a copy between device
 * buffers, a memset), instantiated once and replayed five times: nothing
 * runs while capturing, each replay runs every node. */
#include "corpus_driver.h"

#define BYTES 4096
#define REPLAYS 5

int main(void)
{
    CUcontext ctx;
    CUfunction k = corpus_setup(&ctx, "step");
    CUdeviceptr counter, src, dst, flags;
    CHECK(cuMemAlloc(&counter, 8));
    CHECK(cuMemAlloc(&src, BYTES));
    CHECK(cuMemAlloc(&dst, BYTES));
    CHECK(cuMemAlloc(&flags, BYTES));
    CHECK(cuMemsetD8(counter, 0, 8));
    CHECK(cuMemsetD8(dst, 0, BYTES));
    CHECK(cuMemsetD8(flags, 0, BYTES));
    static uint8_t data[BYTES], back[BYTES];
    corpus_fill(data, BYTES, 7);
    CHECK(cuMemcpyHtoD(src, data, BYTES));

    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus status;
    CHECK(cuStreamIsCapturing(s, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    corpus_launch(k, 4, 64, s, 20000, counter);
    CHECK(cuMemcpyDtoDAsync(dst, src, BYTES, s));
    CHECK(cuMemsetD32Async(flags, 0x01020304u, BYTES / 4, s));
    corpus_launch(k, 4, 64, s, 20000, counter);
    CUgraph graph;
    CHECK(cuStreamEndCapture(s, &graph));
    CHECK(cuStreamIsCapturing(s, &status));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE);
    /* Captured, not run. */
    EXPECT(corpus_read_counter(counter) == 0);
    CHECK(cuMemcpyDtoH(back, dst, BYTES));
    EXPECT(back[0] == 0 && back[BYTES - 1] == 0);

    CUgraphExec exec;
    CHECK(cuGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < REPLAYS; i++)
        CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    uint64_t launches = corpus_read_counter(counter);
    EXPECT(launches == 2 * REPLAYS);
    CHECK(cuMemcpyDtoH(back, dst, BYTES));
    EXPECT(memcmp(back, data, BYTES) == 0);
    uint32_t word;
    CHECK(cuMemcpyDtoH(&word, flags + BYTES - 4, 4));
    EXPECT(word == 0x01020304u);

    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));
    CHECK(cuStreamDestroy(s));
    printf("graph_capture: %llu\n", (unsigned long long)launches);
    return 0;
}
