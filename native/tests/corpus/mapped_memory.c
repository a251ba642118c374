/* Mapped (zero-copy) host memory: the device reads the host's pages through
 * a device address; forwarded mode cannot give one. A driver that cannot map
 * must say so. */
#include "corpus_driver.h"

int main(void)
{
    CUcontext ctx;
    corpus_setup(&ctx, "unused");
    int can_map = 0;
    CHECK(cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0));
    uint32_t *host;
    CHECK(cuMemHostAlloc((void **)&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr d = 0;
    CUresult r = cuMemHostGetDevicePointer(&d, host, 0);
    if (r == CUDA_ERROR_NOT_SUPPORTED) {
        printf("mapped_memory: this driver does not map host memory\n");
        return 0;
    }
    CHECK(r);
    EXPECT(can_map && d != 0);
    CHECK(cuMemsetD32(d, 42, 1024));
    CHECK(cuCtxSynchronize());
    EXPECT(host[1023] == 42);
    printf("mapped_memory: intact\n");
    return 0;
}
