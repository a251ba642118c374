/*
 * Streams and events. Each stream is a FIFO executed in order by its own
 * worker thread (started on first use), so launches return at once and
 * queue depth can grow, as on a GPU. Work counts in three places: the
 * stream (cuStreamSynchronize), its context (cuCtxSynchronize) and the
 * process slot (the checkpoint lock waits for it).
 */
#include "simcuda_internal.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

struct sim_item {
    struct sim_item *next;
    struct sim_work w;
};

/* Events are few and cheap: one lock and one condition for all of them. */
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;

static unsigned long long next_stream_id = 1;

/* ---- events ----------------------------------------------------------------- */

static void event_unref_locked(struct CUevent_st *ev)
{
    if (--ev->refs == 0)
        free(ev);
}

static bool valid_event(CUevent ev)
{
    return ev && __atomic_load_n(&ev->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC_EVENT;
}

CUresult sim_event_create(unsigned int flags, CUevent *out)
{
    struct CUevent_st *ev = calloc(1, sizeof *ev);
    if (!ev)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ev->flags = flags;
    ev->refs = 1;
    ev->magic = SIM_MAGIC_EVENT;
    *out = ev;
    return CUDA_SUCCESS;
}

CUresult sim_event_destroy(CUevent ev)
{
    if (!valid_event(ev))
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&ev_mu);
    ev->magic = SIM_MAGIC_DEAD;
    event_unref_locked(ev); /* queued records keep it alive until they ran */
    pthread_mutex_unlock(&ev_mu);
    return CUDA_SUCCESS;
}

static bool event_complete_locked(const struct CUevent_st *ev)
{
    return ev->completed_seq >= ev->recorded_seq;
}

CUresult sim_event_query(CUevent ev)
{
    if (!valid_event(ev))
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&ev_mu);
    bool done = event_complete_locked(ev);
    pthread_mutex_unlock(&ev_mu);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult sim_event_synchronize(CUevent ev)
{
    if (!valid_event(ev))
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&ev_mu);
    while (!event_complete_locked(ev))
        pthread_cond_wait(&ev_cv, &ev_mu);
    pthread_mutex_unlock(&ev_mu);
    return CUDA_SUCCESS;
}

CUresult sim_event_elapsed(float *ms, CUevent start, CUevent end)
{
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_event(start) || !valid_event(end))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&ev_mu);
    if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!start->recorded_seq || !end->recorded_seq)
        rc = CUDA_ERROR_INVALID_HANDLE; /* never recorded */
    else if (!event_complete_locked(start) || !event_complete_locked(end))
        rc = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)(((double)end->time_ns - (double)start->time_ns) / 1e6);
    pthread_mutex_unlock(&ev_mu);
    return rc;
}

static void run_event_record(struct sim_item *it)
{
    struct CUevent_st *ev = it->w.u.event.ev;
    uint64_t now = sim_now_ns();
    pthread_mutex_lock(&ev_mu);
    if (it->w.u.event.seq > ev->completed_seq) {
        ev->completed_seq = it->w.u.event.seq;
        if (it->w.u.event.seq == ev->recorded_seq)
            ev->time_ns = now;
    }
    event_unref_locked(ev);
    pthread_cond_broadcast(&ev_cv);
    pthread_mutex_unlock(&ev_mu);
}

static void run_event_wait(struct sim_item *it)
{
    struct CUevent_st *ev = it->w.u.event.ev;
    pthread_mutex_lock(&ev_mu);
    while (ev->completed_seq < it->w.u.event.seq)
        pthread_cond_wait(&ev_cv, &ev_mu);
    event_unref_locked(ev);
    pthread_mutex_unlock(&ev_mu);
}

/* ---- executing items ------------------------------------------------------- */

static void log_item(const struct CUstream_st *s, uint16_t kind, const char *name, uint64_t start, uint64_t end,
                     uint64_t solo, uint64_t bytes, const uint32_t *grid, const uint32_t *block)
{
    struct krex_sim_log_record rec;
    sim_log_fill_common(&rec, kind);
    rec.device = s->ctx->phys;
    rec.stream_id = s->id;
    rec.start_ns = start;
    rec.end_ns = end;
    rec.solo_ns = solo;
    rec.bytes = bytes;
    if (grid)
        memcpy(rec.grid, grid, sizeof rec.grid);
    if (block)
        memcpy(rec.block, block, sizeof rec.block);
    if (name)
        strncpy(rec.name, name, sizeof rec.name);
    sim_log_record(&rec);
}

static void fill_memset(void *dst, uint32_t value, unsigned int elem_size, uint64_t count)
{
    if (elem_size == 1) {
        memset(dst, (int)(value & 0xff), count);
    } else if (elem_size == 2) {
        uint16_t v = (uint16_t)value, *p = dst;
        for (uint64_t i = 0; i < count; i++)
            p[i] = v;
    } else {
        uint32_t *p = dst;
        for (uint64_t i = 0; i < count; i++)
            p[i] = value;
    }
}

static void run_item(struct CUstream_st *s, struct sim_item *it)
{
    int phys = s->ctx->phys;
    uint64_t start = sim_now_ns();
    switch (it->w.kind) {
    case SIM_WORK_KERNEL: {
        struct sim_kernel_args *k = &it->w.u.kernel;
        sim_device_run(phys, k->solo_ns, true);
        if (k->counter && !sim_device_range_mapped((uintptr_t)k->counter, sizeof *k->counter))
            sim_ctx_fault(s->ctx, CUDA_ERROR_ILLEGAL_ADDRESS); /* what the GPU's MMU would say */
        else if (k->counter)
            __atomic_add_fetch(k->counter, 1, __ATOMIC_SEQ_CST);
        log_item(s, KREX_SIM_LOG_KERNEL, k->name, start, sim_now_ns(), k->solo_ns, 0, k->grid, k->block);
        break;
    }
    case SIM_WORK_COPY: {
        uint64_t solo = sim_copy_solo_ns(it->w.u.copy.bytes) * (it->w.u.copy.pageable ? KREX_SIM_PAGEABLE_COPY_FACTOR : 1);
        memmove(it->w.u.copy.dst, it->w.u.copy.src, it->w.u.copy.bytes);
        sim_device_run(phys, solo, false);
        log_item(s, it->w.u.copy.log_kind, it->w.u.copy.pageable ? "memcpy pageable" : "memcpy", start, sim_now_ns(), solo,
                 it->w.u.copy.bytes, NULL, NULL);
        break;
    }
    case SIM_WORK_MEMSET: {
        uint64_t bytes = it->w.u.memset.count * it->w.u.memset.elem_size;
        uint64_t solo = sim_copy_solo_ns(bytes);
        fill_memset(it->w.u.memset.dst, it->w.u.memset.value, it->w.u.memset.elem_size, it->w.u.memset.count);
        sim_device_run(phys, solo, false);
        log_item(s, KREX_SIM_LOG_MEMSET, "memset", start, sim_now_ns(), solo, bytes, NULL, NULL);
        break;
    }
    case SIM_WORK_EVENT_RECORD:
        run_event_record(it);
        break;
    case SIM_WORK_EVENT_WAIT:
        run_event_wait(it);
        break;
    case SIM_WORK_HOST_FUNC:
        it->w.u.host.fn(it->w.u.host.data);
        log_item(s, KREX_SIM_LOG_HOST_FUNC, "host_func", start, sim_now_ns(), 0, 0, NULL, NULL);
        break;
    case SIM_WORK_CALLBACK:
        it->w.u.callback.fn(s, CUDA_SUCCESS, it->w.u.callback.data);
        log_item(s, KREX_SIM_LOG_HOST_FUNC, "callback", start, sim_now_ns(), 0, 0, NULL, NULL);
        break;
    }
}

static void free_stream(struct CUstream_st *s)
{
    __atomic_store_n(&s->magic, SIM_MAGIC_DEAD, __ATOMIC_RELEASE);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->changed);
    free(s);
}

static void *stream_worker(void *arg)
{
    struct CUstream_st *s = arg;
    /* Sleeps are the simulated work: make them as precise as the kernel allows. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->destroyed)
            pthread_cond_wait(&s->changed, &s->mu);
        if (!s->head)
            break; /* destroyed and drained */
        struct sim_item *it = s->head;
        pthread_mutex_unlock(&s->mu);
        /* The item stays at the head while it runs, so cuStreamQuery says busy. */
        run_item(s, it);
        struct CUctx_st *ctx = s->ctx;
        pthread_mutex_lock(&s->mu);
        s->head = it->next;
        if (!s->head)
            s->tail = NULL;
        s->pending--;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->mu);
        free(it);
        sim_ctx_pending_done(ctx);
        sim_inflight_done();
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    free_stream(s);
    return NULL;
}

static int start_worker(struct CUstream_st *s)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 1u << 20);
    /* Signals belong to the application's threads, never to ours; but a fault
     * of a copy (a bus error on a host mapping its file lost) is raised in the
     * thread that copies, where blocking it would kill the process before the
     * application's handler could run. */
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGSEGV);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t tid;
    int err = pthread_create(&tid, &attr, stream_worker, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return err;
}

/* A capturing stream records the work into its capture's graph instead. */
static bool captured(struct CUstream_st *s, struct sim_item *it, CUresult *rc)
{
    pthread_mutex_lock(&s->mu);
    bool capturing = s->capture != NULL;
    if (capturing)
        *rc = sim_capture_record(s->capture, &it->w);
    pthread_mutex_unlock(&s->mu);
    if (capturing)
        free(it);
    return capturing;
}

static CUresult enqueue(struct CUstream_st *s, struct sim_item *it)
{
    CUresult captured_rc;
    if (captured(s, it, &captured_rc))
        return captured_rc;
    it->next = NULL;
    sim_ctx_pending_add(s->ctx);
    sim_inflight_add();
    pthread_mutex_lock(&s->mu);
    if (!s->worker_started) {
        if (start_worker(s) != 0) {
            pthread_mutex_unlock(&s->mu);
            sim_ctx_pending_done(s->ctx);
            sim_inflight_done();
            free(it);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        s->worker_started = true;
    }
    if (s->tail)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    s->pending++;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
    return CUDA_SUCCESS;
}

static struct sim_item *new_item(enum sim_work_kind kind)
{
    struct sim_item *it = calloc(1, sizeof *it);
    if (it)
        it->w.kind = kind;
    return it;
}

CUresult sim_enqueue_kernel(struct CUstream_st *s, const struct sim_kernel_args *args)
{
    struct sim_item *it = new_item(SIM_WORK_KERNEL);
    if (!it)
        return CUDA_ERROR_OUT_OF_MEMORY;
    it->w.u.kernel = *args;
    return enqueue(s, it);
}

CUresult sim_enqueue_copy(struct CUstream_st *s, void *dst, const void *src, uint64_t bytes, uint16_t kind,
                          bool pageable)
{
    struct sim_item *it = new_item(SIM_WORK_COPY);
    if (!it)
        return CUDA_ERROR_OUT_OF_MEMORY;
    it->w.u.copy.dst = dst;
    it->w.u.copy.src = src;
    it->w.u.copy.bytes = bytes;
    it->w.u.copy.log_kind = kind;
    it->w.u.copy.pageable = pageable;
    return enqueue(s, it);
}

CUresult sim_enqueue_memset(struct CUstream_st *s, void *dst, uint32_t value, unsigned int elem_size, uint64_t count)
{
    struct sim_item *it = new_item(SIM_WORK_MEMSET);
    if (!it)
        return CUDA_ERROR_OUT_OF_MEMORY;
    it->w.u.memset.dst = dst;
    it->w.u.memset.value = value;
    it->w.u.memset.elem_size = elem_size;
    it->w.u.memset.count = count;
    return enqueue(s, it);
}

CUresult sim_enqueue_work(struct CUstream_st *s, const struct sim_work *w)
{
    struct sim_item *it = new_item(w->kind);
    if (!it)
        return CUDA_ERROR_OUT_OF_MEMORY;
    it->w = *w;
    return enqueue(s, it);
}

CUresult sim_enqueue_host_func(struct CUstream_st *s, CUhostFn fn, void *user_data)
{
    struct sim_item *it = new_item(SIM_WORK_HOST_FUNC);
    if (!it)
        return CUDA_ERROR_OUT_OF_MEMORY;
    it->w.u.host.fn = fn;
    it->w.u.host.data = user_data;
    return enqueue(s, it);
}

CUresult sim_enqueue_callback(struct CUstream_st *s, CUstreamCallback fn, void *user_data)
{
    struct sim_item *it = new_item(SIM_WORK_CALLBACK);
    if (!it)
        return CUDA_ERROR_OUT_OF_MEMORY;
    it->w.u.callback.fn = fn;
    it->w.u.callback.data = user_data;
    return enqueue(s, it);
}

CUresult sim_event_record(CUevent ev, struct CUstream_st *s)
{
    if (!valid_event(ev))
        return CUDA_ERROR_INVALID_HANDLE;
    struct sim_item *it = new_item(SIM_WORK_EVENT_RECORD);
    if (!it)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ev_mu);
    it->w.u.event.ev = ev;
    it->w.u.event.seq = ++ev->recorded_seq;
    ev->refs++;
    pthread_mutex_unlock(&ev_mu);
    CUresult rc = enqueue(s, it);
    if (rc != CUDA_SUCCESS) {
        /* Never reached: mark that record done so waiters do not hang. */
        pthread_mutex_lock(&ev_mu);
        if (ev->completed_seq < ev->recorded_seq)
            ev->completed_seq = ev->recorded_seq;
        event_unref_locked(ev);
        pthread_cond_broadcast(&ev_cv);
        pthread_mutex_unlock(&ev_mu);
    }
    return rc;
}

CUresult sim_stream_wait_event(struct CUstream_st *s, CUevent ev)
{
    if (!valid_event(ev))
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&ev_mu);
    uint64_t target = ev->recorded_seq;
    bool done = ev->completed_seq >= target;
    if (!done)
        ev->refs++;
    pthread_mutex_unlock(&ev_mu);
    if (done)
        return CUDA_SUCCESS; /* nothing to wait for: completed or never recorded */
    struct sim_item *it = new_item(SIM_WORK_EVENT_WAIT);
    if (!it) {
        pthread_mutex_lock(&ev_mu);
        event_unref_locked(ev);
        pthread_mutex_unlock(&ev_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    it->w.u.event.ev = ev;
    it->w.u.event.seq = target;
    CUresult rc = enqueue(s, it);
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_lock(&ev_mu);
        event_unref_locked(ev);
        pthread_mutex_unlock(&ev_mu);
    }
    return rc;
}

/* ---- streams ---------------------------------------------------------------- */

static struct CUstream_st *new_stream(struct CUctx_st *ctx, unsigned int flags, int priority)
{
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority;
    s->id = __atomic_fetch_add(&next_stream_id, 1, __ATOMIC_RELAXED);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->changed, NULL);
    __atomic_store_n(&s->magic, SIM_MAGIC_STREAM, __ATOMIC_RELEASE);
    return s;
}

CUresult sim_stream_create(struct CUctx_st *ctx, unsigned int flags, int priority, CUstream *out)
{
    struct CUstream_st *s = new_stream(ctx, flags, priority);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = s;
    return CUDA_SUCCESS;
}

static bool valid_stream(CUstream s)
{
    return __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC_STREAM;
}

static bool is_default_stream(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

CUresult sim_stream_destroy(CUstream s)
{
    if (is_default_stream(s) || !valid_stream(s))
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&s->mu);
    /* Like the driver: returns at once; queued work still completes, then the
     * worker frees the stream. */
    __atomic_store_n(&s->magic, SIM_MAGIC_DEAD, __ATOMIC_RELEASE);
    s->destroyed = true;
    sim_capture_free(s->capture); /* a capture never ended goes with its stream */
    s->capture = NULL;
    bool free_now = !s->worker_started;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
    if (free_now)
        free_stream(s);
    return CUDA_SUCCESS;
}

CUresult sim_stream_resolve(CUstream in, struct CUstream_st **out)
{
    if (!is_default_stream(in)) {
        if (!valid_stream(in))
            return CUDA_ERROR_INVALID_HANDLE;
        *out = in;
        return sim_ctx_fault_of(in->ctx);
    }
    /* The legacy and the per-thread default stream are one stream per
     * context here (see docs/simulator.md). */
    struct CUctx_st *ctx = sim_ctx_current();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&ctx->mu);
    if (!ctx->null_stream)
        ctx->null_stream = new_stream(ctx, 0, 0);
    *out = ctx->null_stream;
    pthread_mutex_unlock(&ctx->mu);
    return *out ? sim_ctx_fault_of(ctx) : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Waiting for a capturing stream would wait for work that never runs: the
 * driver refuses it and invalidates the capture. */
static bool refused_while_capturing(struct CUstream_st *s, CUresult *rc)
{
    bool capturing = s->capture != NULL;
    if (capturing)
        *rc = sim_capture_refuse(s->capture);
    return capturing;
}

CUresult sim_stream_synchronize(struct CUstream_st *s)
{
    CUresult refused;
    pthread_mutex_lock(&s->mu);
    if (refused_while_capturing(s, &refused)) {
        pthread_mutex_unlock(&s->mu);
        return refused;
    }
    while (s->pending)
        pthread_cond_wait(&s->changed, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return sim_ctx_fault_of(s->ctx);
}

CUresult sim_stream_query(struct CUstream_st *s)
{
    CUresult refused;
    pthread_mutex_lock(&s->mu);
    if (refused_while_capturing(s, &refused)) {
        pthread_mutex_unlock(&s->mu);
        return refused;
    }
    bool idle = s->pending == 0;
    pthread_mutex_unlock(&s->mu);
    return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
