/*
 * Contexts: each thread's context stack (the current context is its top),
 * a context's initialisation, and the count of work queued on its streams
 * that cuCtxSynchronize waits for. Below both the entry points and the
 * streams; it calls neither.
 */
#include "simcuda_internal.h"

#include <string.h>

/* Each thread's context stack, as in the driver. */
#define SIM_CTX_STACK_DEPTH 64
static _Thread_local struct CUctx_st *ctx_stack[SIM_CTX_STACK_DEPTH];
static _Thread_local int ctx_depth;

bool sim_ctx_valid(CUcontext ctx)
{
    return ctx && __atomic_load_n(&ctx->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC_CTX;
}

CUcontext sim_ctx_current(void)
{
    if (ctx_depth == 0)
        return NULL;
    CUcontext ctx = ctx_stack[ctx_depth - 1];
    return sim_ctx_valid(ctx) ? ctx : NULL;
}

CUresult sim_ctx_push(CUcontext ctx)
{
    if (ctx_depth == SIM_CTX_STACK_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_pop(CUcontext *pctx)
{
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext ctx = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = ctx;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_set_current(CUcontext ctx)
{
    if (!ctx) {
        if (ctx_depth > 0)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (ctx_depth == 0)
        return sim_ctx_push(ctx);
    ctx_stack[ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

void sim_ctx_forget(CUcontext ctx)
{
    for (int i = 0; i < ctx_depth; i++) {
        if (ctx_stack[i] == ctx) {
            memmove(&ctx_stack[i], &ctx_stack[i + 1], (size_t)(ctx_depth - i - 1) * sizeof ctx_stack[0]);
            ctx_depth--;
            i--;
        }
    }
}

CUresult sim_ctx_init(struct CUctx_st *ctx, int ordinal, bool primary, unsigned int flags)
{
    static unsigned long long next_ctx_id = 1;
    memset(ctx, 0, sizeof *ctx);
    ctx->ordinal = ordinal;
    ctx->phys = sim_proc.visible[ordinal];
    ctx->primary = primary;
    ctx->flags = flags;
    ctx->id = __atomic_fetch_add(&next_ctx_id, 1, __ATOMIC_RELAXED);
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_cond_init(&ctx->idle, NULL);
    __atomic_store_n(&ctx->magic, SIM_MAGIC_CTX, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

CUresult sim_ctx_synchronize(struct CUctx_st *ctx)
{
    pthread_mutex_lock(&ctx->mu);
    while (ctx->pending)
        pthread_cond_wait(&ctx->idle, &ctx->mu);
    pthread_mutex_unlock(&ctx->mu);
    return sim_ctx_fault_of(ctx);
}

void sim_ctx_fault(struct CUctx_st *ctx, CUresult fault)
{
    CUresult none = CUDA_SUCCESS;
    __atomic_compare_exchange_n(&ctx->fault, &none, fault, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

CUresult sim_ctx_fault_of(struct CUctx_st *ctx)
{
    return __atomic_load_n(&ctx->fault, __ATOMIC_ACQUIRE);
}

void sim_ctx_pending_add(struct CUctx_st *ctx)
{
    pthread_mutex_lock(&ctx->mu);
    ctx->pending++;
    pthread_mutex_unlock(&ctx->mu);
}

void sim_ctx_pending_done(struct CUctx_st *ctx)
{
    pthread_mutex_lock(&ctx->mu);
    if (--ctx->pending == 0)
        pthread_cond_broadcast(&ctx->idle);
    pthread_mutex_unlock(&ctx->mu);
}
