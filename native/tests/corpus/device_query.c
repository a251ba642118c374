/* Device queries a benchmark prints in its header: count, name, UUID, memory,
 * compute capability, SMs, clocks, limits. */
#include "corpus_driver.h"

int main(void)
{
    CHECK(cuInit(0));
    int count = 0, version = 0;
    CHECK(cuDeviceGetCount(&count));
    CHECK(cuDriverGetVersion(&version));
    EXPECT(count >= 1 && version >= 12000);
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    char name[256];
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    EXPECT(strlen(name) > 0);
    CUuuid uuid;
    CHECK(cuDeviceGetUuid(&uuid, dev));
    size_t total = 0;
    CHECK(cuDeviceTotalMem(&total, dev));
    EXPECT(total >= (1ull << 30));
    int major = 0, minor = -1, sms = 0, warp = 0, threads = 0, smem = 0, l2 = 0, engines = 0;
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CHECK(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
    CHECK(cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev));
    CHECK(cuDeviceGetAttribute(&smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    CHECK(cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
    CHECK(cuDeviceGetAttribute(&engines, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, dev));
    EXPECT(major >= 7 && minor >= 0 && sms > 0 && warp == 32 && threads >= 1024 && smem >= 49152 && l2 > 0);
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    size_t free_b = 0, total_b = 0;
    CHECK(cuMemGetInfo(&free_b, &total_b));
    EXPECT(free_b <= total_b && total_b == total);
    printf("device_query: %s sm_%d%d, %d SMs, %zu MiB\n", name, major, minor, sms, total >> 20);
    return 0;
}
