/* Managed memory where the device has it; a device without it must refuse
 * the allocation (the simulated one has none). */
#include "corpus_driver.h"

int main(void)
{
    CUcontext ctx;
    corpus_setup(&ctx, "unused");
    int managed = 0;
    CHECK(cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0));
    CUdeviceptr p;
    CUresult r = cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_GLOBAL);
    if (!managed) {
        EXPECT(r != CUDA_SUCCESS);
        printf("managed_memory: not on this device\n");
        return 0;
    }
    CHECK(r);
    CHECK(cuMemsetD32(p, 7, 1024));
    CHECK(cuCtxSynchronize());
    EXPECT(((uint32_t *)(uintptr_t)p)[1023] == 7);
    printf("managed_memory: intact\n");
    return 0;
}
