/*
 * Drain helper: when the runtime asks (drain_req bumped in our gate entry), wait
 * until the GPU work this process already submitted has finished, then
 * acknowledge (drain_ack = drain_req, FUTEX_WAKE). Only then may the runtime
 * let the region holder measure.
 *
 * Plain C threads, started with the process's registration (a coordinator
 * per gate entry: a command placed on a set of GPUs has one in each GPU's
 * gate, and a drain asked on any of them synchronises every context):
 *   - the coordinator waits for requests and acknowledges, within a bound;
 *   - the worker synchronises each context this process used (pushed onto its
 *     own stack: cuCtxSynchronize covers every stream of a context). Its
 *     stream-capture mode is relaxed so that a stream being captured by the
 *     program does not make the synchronise fail or invalidate the capture.
 * The split exists because cuCtxSynchronize cannot be interrupted: when it
 * outlasts the bound the coordinator acknowledges KREX_DRAIN_TIMED_OUT and the
 * worker finishes in the background.
 *
 * Both threads call the real driver directly and run with krex_depth set, so
 * the gate (closed at that moment) never stops them.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Our entry in each gate (several for a command placed on a set of GPUs):
 * each has a coordinator; one worker synchronises for them all. */
static struct krex_gate_proc *entries[KREX_GATE_SET_MAX];
static unsigned n_entries;
static int started;

/* Jobs: the coordinator posts, the worker completes; both counters only grow. */
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_posted_cv;
static pthread_cond_t job_done_cv;
static uint64_t job_posted, job_done;
static uint32_t job_result;

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
    for (unsigned k = 0; k < n_entries; k++) {
        __atomic_store_n(&entries[k]->contexts, n_contexts, __ATOMIC_RELAXED);
        __atomic_store_n(&entries[k]->uses_cuda, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&ctx_lock);
}

/* Synchronises every context seen; drops contexts that no longer exist. */
static uint32_t sync_all(void)
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

static void *worker_main(void *arg)
{
    (void)arg;
    krex_depth = 1;
    capture_mode_fn exchange = (capture_mode_fn)krex_driver_symbol("cuThreadExchangeStreamCaptureMode");
    if (exchange != NULL) {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        exchange(&mode);
    }
    pthread_mutex_lock(&job_lock);
    for (;;) {
        while (job_done == job_posted)
            pthread_cond_wait(&job_posted_cv, &job_lock);
        uint64_t target = job_posted;
        pthread_mutex_unlock(&job_lock);
        uint32_t r = sync_all();
        pthread_mutex_lock(&job_lock);
        job_done = target;
        job_result = r;
        pthread_cond_broadcast(&job_done_cv);
    }
    return NULL;
}

static uint64_t drain_bound_ns(void)
{
    const char *env = getenv(KREX_ENV_DRAIN_TIMEOUT_MS);
    if (env != NULL && *env != '\0') {
        char *end;
        unsigned long long ms = strtoull(env, &end, 10);
        if (*end == '\0' && ms > 0)
            return ms * 1000000ull;
    }
    const struct krex_gate_header *g = krex_gate_header();
    uint64_t v = g ? __atomic_load_n(&g->drain_timeout_ns, __ATOMIC_RELAXED) : 0;
    return v ? v : KREX_GATE_DEFAULT_DRAIN_TIMEOUT_NS;
}

static uint32_t drain_now(void)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    uint64_t ns = (uint64_t)deadline.tv_nsec + drain_bound_ns();
    deadline.tv_sec += (time_t)(ns / 1000000000ull);
    deadline.tv_nsec = (long)(ns % 1000000000ull);

    pthread_mutex_lock(&job_lock);
    /* Always a fresh round: a round already running may have started before
     * work this drain must cover. */
    uint64_t target = ++job_posted;
    pthread_cond_signal(&job_posted_cv);
    int rc = 0;
    while (job_done < target && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&job_done_cv, &job_lock, &deadline);
    uint32_t result = job_done >= target ? job_result : KREX_DRAIN_TIMED_OUT;
    pthread_mutex_unlock(&job_lock);
    return result;
}

static void *coordinator_main(void *arg)
{
    struct krex_gate_proc *e = arg;
    krex_depth = 1;
    uint32_t handled = __atomic_load_n(&e->drain_ack, __ATOMIC_ACQUIRE);
    for (;;) {
        uint32_t req = __atomic_load_n(&e->drain_req, __ATOMIC_ACQUIRE);
        if (req == handled) {
            krex_futex_wait(&e->drain_req, req, 0);
            continue;
        }
        uint32_t result = drain_now();
        __atomic_store_n(&e->drain_result, result, __ATOMIC_RELAXED);
        __atomic_fetch_add(&e->drains_total, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&e->drain_ack_ns, krex_now_ns(), __ATOMIC_RELAXED);
        krex_stats_note("drains");
        __atomic_store_n(&e->drain_ack, req, __ATOMIC_SEQ_CST);
        krex_futex_wake_all(&e->drain_ack);
        handled = req;
    }
    return NULL;
}

static void init_sync_objects(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&job_done_cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_cond_init(&job_posted_cv, NULL);
}

void krex_drain_start(struct krex_gate_proc *e)
{
    pthread_mutex_lock(&ctx_lock);
    for (unsigned k = 0; k < n_entries; k++)
        if (entries[k] == e) {
            pthread_mutex_unlock(&ctx_lock);
            return; /* started for this entry already */
        }
    if (n_entries == KREX_GATE_SET_MAX) {
        pthread_mutex_unlock(&ctx_lock);
        return;
    }
    entries[n_entries++] = e;
    __atomic_store_n(&e->contexts, n_contexts, __ATOMIC_RELAXED);
    __atomic_store_n(&e->uses_cuda, n_contexts > 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&ctx_lock);
    bool first = !__atomic_exchange_n(&started, 1, __ATOMIC_ACQ_REL);
    if (first)
        init_sync_objects();

    /* The helpers take no signals: those belong to the program's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t t;
    if ((first && pthread_create(&t, &attr, worker_main, NULL) != 0) ||
        pthread_create(&t, &attr, coordinator_main, e) != 0)
        krex_log("cannot start the drain helper; drains of this process will time out");
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void krex_drain_after_fork(void)
{
    pthread_mutex_init(&ctx_lock, NULL);
    pthread_mutex_init(&job_lock, NULL);
    n_contexts = 0;
    last_context = NULL;
    n_entries = 0;
    job_posted = job_done = 0;
    started = 0;
}
