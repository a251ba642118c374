/* Four threads launching on streams of their own and on the per-thread
 * default stream, as a multi-threaded harness does. */
#include <pthread.h>

#include "corpus_driver.h"

#define THREADS 4
#define LAUNCHES 25

static CUcontext ctx;
static CUfunction kernel;
static CUdeviceptr counter;

static void *worker(void *arg)
{
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < LAUNCHES; i++)
        corpus_launch(kernel, 8, 128, i % 2 ? s : CU_STREAM_PER_THREAD, 2000, counter);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHECK(cuStreamDestroy(s));
    return NULL;
}

int main(void)
{
    kernel = corpus_setup(&ctx, "saxpy");
    CHECK(cuMemAlloc(&counter, 8));
    CHECK(cuMemsetD8(counter, 0, 8));
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        EXPECT(pthread_create(&t[i], NULL, worker, NULL) == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(cuCtxSynchronize());
    EXPECT(corpus_read_counter(counter) == THREADS * LAUNCHES);
    printf("threaded_launches: %d\n", THREADS * LAUNCHES);
    return 0;
}
