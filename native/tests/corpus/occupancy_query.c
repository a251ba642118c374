/* The occupancy queries a benchmark sizes its grid with: function attributes,
 * the dynamic shared-memory opt-in, active blocks per SM (with and without
 * flags), the potential block size (with a fixed size and with a callback)
 * and the dynamic shared memory left per block. */
#include "corpus_driver.h"

static size_t smem_of_block(int block)
{
    return (size_t)block * 64; /* 64 bytes a thread: a tiled kernel's tile */
}

int main(void)
{
    CUcontext ctx;
    CUfunction k = corpus_setup(&ctx, "sgemm_tiled");
    int max_threads = 0, regs = -1, dyn = 0, sms = 0;
    CHECK(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k));
    CHECK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k));
    EXPECT(max_threads >= 256 && regs >= 0);
    CHECK(cuFuncSetAttribute(k, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 98304));
    CHECK(cuFuncGetAttribute(&dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k));
    EXPECT(dyn == 98304);
    CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));

    int small = 0, big = 0, flagged = 0;
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&small, k, 128, 0));
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&big, k, 1024, 0));
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&flagged, k, 128, 0,
                                                               CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
    EXPECT(small >= big && big >= 1 && flagged == small);
    int shared = 0;
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&shared, k, 128, 98304));
    EXPECT(shared >= 1 && shared < small);

    int grid = 0, block = 0, grid_cb = 0, block_cb = 0;
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, k, NULL, 0, 0));
    EXPECT(block > 0 && block <= max_threads && block % 32 == 0 && grid > 0 && grid % sms == 0);
    CHECK(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid_cb, &block_cb, k, smem_of_block, 0, 512, 0));
    EXPECT(block_cb > 0 && block_cb <= 512 && grid_cb % sms == 0);
    size_t left = 0;
    CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&left, k, 2, 256));
    EXPECT(left > 0 && left <= 98304);

    CUdeviceptr counter;
    CHECK(cuMemAlloc(&counter, 8));
    CHECK(cuMemsetD8(counter, 0, 8));
    corpus_launch(k, (unsigned)grid, (unsigned)block, NULL, 1000, counter);
    CHECK(cuCtxSynchronize());
    EXPECT(corpus_read_counter(counter) == 1);
    printf("occupancy_query: %d blocks/SM at 128, block %d grid %d, with callback block %d\n", small, block, grid,
           block_cb);
    return 0;
}
