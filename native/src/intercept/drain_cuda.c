/*
 * What the CUDA library's drain waits for (drain.c runs it on its worker
 * thread): every context this process used, pushed onto the worker's own
 * stack and synchronised (cuCtxSynchronize covers every stream of a
 * context). The worker's stream-capture mode is relaxed so that a stream
 * being captured by the program does not make the synchronise fail or
 * invalidate the capture.
 */
#include <pthread.h>
#include <string.h>

#include "intercept.h"

#define MAX_CONTEXTS 64

typedef CUresult(CUDAAPI *ctx_get_fn)(CUcontext *);
typedef CUresult(CUDAAPI *ctx_push_fn)(CUcontext);
typedef CUresult(CUDAAPI *ctx_pop_fn)(CUcontext *);
typedef CUresult(CUDAAPI *ctx_sync_fn)(void);
typedef CUresult(CUDAAPI *capture_mode_fn)(CUstreamCaptureMode *);

static ctx_get_fn real_ctx_get;

/* Contexts seen after gated calls; the thread-local copy saves the lock on
 * the common path (same context as this thread's last call). */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext contexts[MAX_CONTEXTS];
static unsigned n_contexts;
static KREX_TLS CUcontext last_context;

void krex_drain_publish(struct krex_gate_proc *e)
{
    pthread_mutex_lock(&ctx_lock);
    krex_drain_publish_count(e, n_contexts);
    pthread_mutex_unlock(&ctx_lock);
}

void krex_drain_note_context(void)
{
    ctx_get_fn get = __atomic_load_n(&real_ctx_get, __ATOMIC_ACQUIRE);
    if (get == NULL) {
        get = (ctx_get_fn)krex_driver_symbol("cuCtxGetCurrent");
        if (get == NULL)
            return;
        __atomic_store_n(&real_ctx_get, get, __ATOMIC_RELEASE);
    }
    CUcontext c = NULL;
    if (get(&c) != CUDA_SUCCESS || c == NULL || c == last_context)
        return;
    last_context = c;
    pthread_mutex_lock(&ctx_lock);
    unsigned i = 0;
    while (i < n_contexts && contexts[i] != c)
        i++;
    if (i == n_contexts && n_contexts < MAX_CONTEXTS)
        contexts[n_contexts++] = c;
    krex_drain_publish_everywhere(n_contexts);
    pthread_mutex_unlock(&ctx_lock);
}

void krex_drain_worker_init(void)
{
    capture_mode_fn exchange = (capture_mode_fn)krex_driver_symbol("cuThreadExchangeStreamCaptureMode");
    if (exchange != NULL) {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        exchange(&mode);
    }
}

/* Synchronises every context seen; drops contexts that no longer exist. */
uint32_t krex_drain_sync_all(void)
{
    ctx_push_fn push = (ctx_push_fn)krex_driver_symbol("cuCtxPushCurrent_v2");
    ctx_pop_fn pop = (ctx_pop_fn)krex_driver_symbol("cuCtxPopCurrent_v2");
    ctx_sync_fn sync = (ctx_sync_fn)krex_driver_symbol("cuCtxSynchronize");
    if (push == NULL || pop == NULL || sync == NULL)
        return KREX_DRAIN_ERROR;
    CUcontext todo[MAX_CONTEXTS];
    pthread_mutex_lock(&ctx_lock);
    unsigned n = n_contexts;
    memcpy(todo, contexts, n * sizeof todo[0]);
    pthread_mutex_unlock(&ctx_lock);

    uint32_t result = KREX_DRAIN_OK;
    for (unsigned i = 0; i < n; i++) {
        CUresult r = push(todo[i]);
        if (r == CUDA_SUCCESS) {
            r = sync();
            CUcontext popped;
            pop(&popped);
        }
        if (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_CONTEXT_IS_DESTROYED ||
            r == CUDA_ERROR_DEINITIALIZED) {
            /* Gone: nothing of it can be running. */
            pthread_mutex_lock(&ctx_lock);
            for (unsigned j = 0; j < n_contexts; j++)
                if (contexts[j] == todo[i])
                    contexts[j] = contexts[--n_contexts];
            pthread_mutex_unlock(&ctx_lock);
        } else if (r != CUDA_SUCCESS) {
            result = KREX_DRAIN_ERROR;
        }
    }
    return result;
}

void krex_drain_vendor_after_fork(void)
{
    pthread_mutex_init(&ctx_lock, NULL);
    n_contexts = 0;
    last_context = NULL;
}
