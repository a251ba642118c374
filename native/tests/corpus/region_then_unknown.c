/* Measures in a region first, then calls what forwarded mode does not serve
 * (managed memory): running it again in process mode would measure twice,
 * so forwarded mode refuses it instead. Exits 3 when the call fails. */
#include "corpus_driver.h"
#include "krex.h"

int main(void)
{
    CUcontext ctx;
    CUfunction k = corpus_setup(&ctx, "saxpy");
    CUdeviceptr counter;
    CHECK(cuMemAlloc(&counter, 8));
    CHECK(cuMemsetD8(counter, 0, 8));
    EXPECT(krex_region_enter() == 0);
    corpus_launch(k, 1, 32, NULL, 10000, counter);
    CHECK(cuCtxSynchronize());
    EXPECT(krex_region_exit() == 0);
    CUdeviceptr managed;
    CUresult r = cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL);
    printf("region_then_unknown: cuMemAllocManaged %d\n", (int)r);
    return r == CUDA_SUCCESS ? 0 : 3;
}
