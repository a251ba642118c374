/* A host function queued behind a kernel (its code lives in the program: not
 * forwarded, the command runs in process mode). */
#include "corpus_driver.h"

static int called;

static void CUDA_CB done(void *arg)
{
    *(int *)arg += 1;
}

int main(void)
{
    CUcontext ctx;
    CUfunction k = corpus_setup(&ctx, "saxpy");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    corpus_launch(k, 1, 32, s, 10000, 0);
    CHECK(cuLaunchHostFunc(s, done, &called));
    CHECK(cuStreamSynchronize(s));
    EXPECT(called == 1);
    printf("host_callback: called\n");
    return 0;
}
