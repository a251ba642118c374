/*
 * Function attributes, occupancy queries and registered host memory of the
 * simulated driver. Every simulated kernel looks alike: 32 registers a
 * thread, no static shared memory, up to 1024 threads a block, on a device
 * of the attributes simcuda_api_device.c answers (132 SMs, 2048 threads,
 * 32 blocks, 64 Ki registers and 228 KiB of shared memory per SM). The
 * occupancy follows the same limits the real calculator takes the minimum
 * of, so a benchmark that sizes its grid from it gets plausible numbers.
 */
#include "simcuda_internal.h"

#include <stdlib.h>

#define SIM_FUNC_REGS 32
#define SIM_FUNC_MAX_THREADS 1024
#define SIM_DEFAULT_DYN_SMEM 49152
#define SIM_OPTIN_SMEM 232448
#define SIM_SM_COUNT 132
#define SIM_SM_THREADS 2048
#define SIM_SM_BLOCKS 32
#define SIM_SM_REGS 65536
#define SIM_SM_SMEM 233472
#define SIM_BLOCK_RESERVED_SMEM 1024

static bool valid_function(CUfunction f)
{
    return f && __atomic_load_n(&f->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC_FUNC;
}

static int dyn_limit(CUfunction f)
{
    return f->max_dynamic_smem > 0 ? f->max_dynamic_smem : SIM_DEFAULT_DYN_SMEM;
}

static CUresult func_get_attribute(int *pi, CUfunction_attribute attrib, CUfunction f)
{
    CHECK_INIT();
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = SIM_FUNC_MAX_THREADS; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = SIM_FUNC_REGS; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = dyn_limit(f); break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout ? f->carveout : -1; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    SIM_GATED(func_get_attribute(pi, attrib, hfunc));
}

static CUresult func_set_attribute(CUfunction f, CUfunction_attribute attrib, int value)
{
    CHECK_INIT();
    if (!valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > SIM_OPTIN_SMEM)
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dynamic_smem = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100)
            return CUDA_ERROR_INVALID_VALUE;
        f->carveout = value;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    SIM_GATED(func_set_attribute(hfunc, attrib, value));
}

/* Blocks of `block` threads using `smem` dynamic shared memory that fit one SM. */
static int blocks_per_sm(CUfunction f, int block, size_t smem)
{
    if (block <= 0 || block > SIM_FUNC_MAX_THREADS || smem > (size_t)dyn_limit(f))
        return 0;
    int warps = (block + 31) / 32;
    int n = SIM_SM_BLOCKS;
    int by_threads = SIM_SM_THREADS / (warps * 32);
    int by_regs = SIM_SM_REGS / (warps * 32 * SIM_FUNC_REGS);
    int by_smem = (int)(SIM_SM_SMEM / (smem + SIM_BLOCK_RESERVED_SMEM));
    if (by_threads < n)
        n = by_threads;
    if (by_regs < n)
        n = by_regs;
    if (by_smem < n)
        n = by_smem;
    return n;
}

static CUresult occupancy_active(int *num, CUfunction f, int block, size_t smem, unsigned flags)
{
    CHECK_INIT();
    if (!num || flags > CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!sim_ctx_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    *num = blocks_per_sm(f, block, smem);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                             size_t dynamicSMemSize)
{
    SIM_GATED(occupancy_active(numBlocks, func, blockSize, dynamicSMemSize, 0));
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
                                                                      int blockSize, size_t dynamicSMemSize,
                                                                      unsigned int flags)
{
    SIM_GATED(occupancy_active(numBlocks, func, blockSize, dynamicSMemSize, flags));
}

/* The largest block (a multiple of the warp) of the highest occupancy, as
 * the driver's calculator picks it. */
static CUresult occupancy_block_size(int *min_grid, int *block_size, CUfunction f, CUoccupancyB2DSize to_smem,
                                     size_t smem, int limit, unsigned flags)
{
    CHECK_INIT();
    if (!min_grid || !block_size || flags > CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!sim_ctx_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    int top = limit > 0 && limit < SIM_FUNC_MAX_THREADS ? limit : SIM_FUNC_MAX_THREADS;
    int best = 0, best_blocks = 0, best_occupancy = 0;
    for (int b = top / 32 * 32; b > 0; b -= 32) {
        int n = blocks_per_sm(f, b, to_smem ? to_smem(b) : smem);
        if (n * b > best_occupancy)
            best = b, best_blocks = n, best_occupancy = n * b;
    }
    *block_size = best;
    *min_grid = best_blocks * SIM_SM_COUNT;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                  size_t dynamicSMemSize, int blockSizeLimit)
{
    SIM_GATED(occupancy_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                                   blockSizeLimit, 0));
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                           CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                           size_t dynamicSMemSize, int blockSizeLimit,
                                                           unsigned int flags)
{
    SIM_GATED(occupancy_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                                   blockSizeLimit, flags));
}

static CUresult available_dynamic_smem(size_t *out, CUfunction f, int blocks, int block)
{
    CHECK_INIT();
    if (!out || blocks <= 0 || block <= 0 || block > SIM_FUNC_MAX_THREADS)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (blocks_per_sm(f, block, 0) < blocks) {
        *out = 0;
        return CUDA_SUCCESS;
    }
    size_t per_block = SIM_SM_SMEM / (size_t)blocks;
    per_block = per_block > SIM_BLOCK_RESERVED_SMEM ? per_block - SIM_BLOCK_RESERVED_SMEM : 0;
    *out = per_block < (size_t)dyn_limit(f) ? per_block : (size_t)dyn_limit(f);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
                                                         int blockSize)
{
    SIM_GATED(available_dynamic_smem(dynamicSmemSize, func, numBlocks, blockSize));
}

/* Registering remembers the range as page-locked (simcuda_host_memory.c):
 * copies from or to it then cost what a DMA costs. */
static CUresult host_register(void *p, size_t n, unsigned flags)
{
    CHECK_INIT();
    (void)flags;
    if (!p || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_ctx_current() ? sim_host_pin(p, n) : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    SIM_GATED(host_register(p, bytesize, Flags));
}

static CUresult host_unregister(void *p)
{
    CHECK_INIT();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_host_unpin(p) ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    SIM_GATED(host_unregister(p));
}
