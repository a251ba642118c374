/*
 * Driver entry points: primary contexts and contexts. The thread's context
 * stack and the contexts' pending work are simcuda_context.c's.
 */
#include "simcuda_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- contexts ------------------------------------------------------------------ */

static pthread_mutex_t primary_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st primary_ctx[KREX_SIM_MAX_DEVICES];
static unsigned int primary_refs[KREX_SIM_MAX_DEVICES];
static unsigned int primary_flags[KREX_SIM_MAX_DEVICES];

static CUresult primary_retain(CUcontext *pctx, CUdevice dev)
{
    CHECK_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (__atomic_load_n(&primary_ctx[dev].magic, __ATOMIC_ACQUIRE) != SIM_MAGIC_CTX)
        sim_host_latency(KREX_SIM_ENV_CTX_CREATE_MS); /* creating it is what costs */
    pthread_mutex_lock(&primary_mu);
    if (primary_ctx[dev].magic != SIM_MAGIC_CTX)
        sim_ctx_init(&primary_ctx[dev], dev, true, primary_flags[dev]);
    primary_refs[dev]++;
    pthread_mutex_unlock(&primary_mu);
    *pctx = &primary_ctx[dev];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    SIM_GATED(primary_retain(pctx, dev));
}

/* The primary context is never torn down: its handle stays valid for the life
 * of the process (queued work and other threads may still name it). */
static CUresult primary_release(CUdevice dev)
{
    CHECK_INIT();
    if (!sim_valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&primary_mu);
    if (primary_refs[dev] == 0)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else
        primary_refs[dev]--;
    pthread_mutex_unlock(&primary_mu);
    return rc;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    SIM_GATED(primary_release(dev));
}

static CUresult primary_reset(CUdevice dev)
{
    CHECK_INIT();
    if (!sim_valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (primary_ctx[dev].magic == SIM_MAGIC_CTX)
        sim_ctx_synchronize(&primary_ctx[dev]);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    SIM_GATED(primary_reset(dev));
}

static CUresult primary_get_state(CUdevice dev, unsigned int *flags, int *active)
{
    CHECK_INIT();
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&primary_mu);
    *flags = primary_flags[dev];
    *active = primary_refs[dev] > 0;
    pthread_mutex_unlock(&primary_mu);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    SIM_GATED(primary_get_state(dev, flags, active));
}

static CUresult primary_set_flags(CUdevice dev, unsigned int flags)
{
    CHECK_INIT();
    if (!sim_valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&primary_mu);
    primary_flags[dev] = flags;
    primary_ctx[dev].flags = flags;
    pthread_mutex_unlock(&primary_mu);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    SIM_GATED(primary_set_flags(dev, flags));
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CHECK_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_host_latency(KREX_SIM_ENV_CTX_CREATE_MS);
    struct CUctx_st *ctx = malloc(sizeof *ctx);
    if (!ctx)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_ctx_init(ctx, dev, false, flags);
    CUresult rc = sim_ctx_push(ctx);
    if (rc != CUDA_SUCCESS) {
        free(ctx);
        return rc;
    }
    *pctx = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    SIM_GATED(ctx_create(pctx, flags, dev));
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
                                CUdevice dev)
{
    (void)paramsArray;
    (void)numParams; /* execution affinity has no meaning on the simulator */
    SIM_GATED(ctx_create(pctx, flags, dev));
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)
{
    (void)ctxCreateParams;
    SIM_GATED(ctx_create(pctx, flags, dev));
}

/* The context is synchronised and invalidated but its memory is kept: idle
 * stream workers may still hold it. */
static CUresult ctx_destroy(CUcontext ctx)
{
    CHECK_INIT();
    if (!sim_ctx_valid(ctx) || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_ctx_synchronize(ctx);
    __atomic_store_n(&ctx->magic, SIM_MAGIC_DEAD, __ATOMIC_RELEASE);
    sim_ctx_forget(ctx);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    SIM_GATED(ctx_destroy(ctx));
}

static CUresult ctx_set_current(CUcontext ctx)
{
    CHECK_INIT();
    if (ctx && !sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return sim_ctx_set_current(ctx);
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    SIM_GATED(ctx_set_current(ctx));
}

static CUresult ctx_get_current(CUcontext *pctx)
{
    CHECK_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = sim_ctx_current();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    SIM_GATED(ctx_get_current(pctx));
}

static CUresult ctx_push(CUcontext ctx)
{
    CHECK_INIT();
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return sim_ctx_push(ctx);
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
    SIM_GATED(ctx_push(ctx));
}

static CUresult ctx_pop(CUcontext *pctx)
{
    CHECK_INIT();
    return sim_ctx_pop(pctx);
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
    SIM_GATED(ctx_pop(pctx));
}

static CUresult ctx_sync(CUcontext ctx)
{
    CHECK_INIT();
    if (!ctx)
        ctx = sim_ctx_current();
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return sim_ctx_synchronize(ctx);
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    SIM_GATED(ctx_sync(NULL));
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    SIM_GATED(ctx_sync(ctx));
}

static CUresult ctx_get_device(CUdevice *device, CUcontext ctx)
{
    CHECK_INIT();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx)
        ctx = sim_ctx_current();
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = ctx->ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    SIM_GATED(ctx_get_device(device, NULL));
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    SIM_GATED(ctx_get_device(device, ctx));
}

static CUresult ctx_get_flags(unsigned int *flags)
{
    CHECK_INIT();
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = sim_ctx_current();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *flags = ctx->flags;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
    SIM_GATED(ctx_get_flags(flags));
}

static CUresult ctx_get_id(CUcontext ctx, unsigned long long *id)
{
    CHECK_INIT();
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx)
        ctx = sim_ctx_current();
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *id = ctx->id;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    SIM_GATED(ctx_get_id(ctx, ctxId));
}

static CUresult ctx_get_api_version(CUcontext ctx, unsigned int *version)
{
    CHECK_INIT();
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx)
        ctx = sim_ctx_current();
    if (!sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020; /* what the driver reports for every context since CUDA 3.2 */
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    SIM_GATED(ctx_get_api_version(ctx, version));
}

static CUresult ctx_get_stream_priority_range(int *least, int *greatest)
{
    CHECK_INIT();
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    SIM_GATED(ctx_get_stream_priority_range(leastPriority, greatestPriority));
}
