/* A graph of kernel nodes, instantiated once and launched ten times (graphs
 * built node by node are not forwarded: the command runs in process mode;
 * graph_capture.c's captured one is). */
#include "corpus_driver.h"

int main(void)
{
    CUcontext ctx;
    CUfunction k = corpus_setup(&ctx, "step");
    CUdeviceptr counter;
    CHECK(cuMemAlloc(&counter, 8));
    CHECK(cuMemsetD8(counter, 0, 8));
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    unsigned long long ns = 1000;
    void *params[] = {&ns, &counter};
    CUDA_KERNEL_NODE_PARAMS p = {0};
    p.func = k;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 32, p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = params;
    CUgraphNode first, second;
    CHECK(cuGraphAddKernelNode(&first, g, NULL, 0, &p));
    CHECK(cuGraphAddKernelNode(&second, g, &first, 1, &p));
    CUgraphExec exec;
    CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 10; i++)
        CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(corpus_read_counter(counter) == 20);
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(g));
    printf("graph_launch: 20\n");
    return 0;
}
