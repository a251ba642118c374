/* A producer stream and a consumer stream ordered by an event, the kernel
 * between two events timed, event queries. */
#include "corpus_driver.h"

int main(void)
{
    CUcontext ctx;
    CUfunction k = corpus_setup(&ctx, "reduce");
    CUstream producer, consumer;
    CHECK(cuStreamCreateWithPriority(&producer, CU_STREAM_NON_BLOCKING, 0));
    CHECK(cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING));
    CUevent ready, start, stop;
    CHECK(cuEventCreate(&ready, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&stop, CU_EVENT_BLOCKING_SYNC));
    CUdeviceptr counter;
    CHECK(cuMemAlloc(&counter, 8));
    CHECK(cuMemsetD8Async(counter, 0, 8, producer));
    corpus_launch(k, 132, 256, producer, 200000, counter);
    CHECK(cuEventRecord(ready, producer));
    CHECK(cuStreamWaitEvent(consumer, ready, 0));
    CHECK(cuEventRecord(start, consumer));
    corpus_launch(k, 132, 256, consumer, 300000, counter);
    CHECK(cuEventRecord(stop, consumer));
    CHECK(cuEventSynchronize(stop));
    EXPECT(cuEventQuery(stop) == CUDA_SUCCESS);
    CHECK(cuStreamSynchronize(consumer));
    EXPECT(cuStreamQuery(consumer) == CUDA_SUCCESS);
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, start, stop));
    EXPECT(ms >= 0.25f); /* the 0.3 ms kernel, ordered after the producer's */
    EXPECT(corpus_read_counter(counter) == 2);
    printf("events_stream_wait: ordered, timed\n");
    return 0;
}
