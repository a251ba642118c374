/*
 * Measurement integrity: for each pair of CUDA events timed inside a region
 * (both recorded while this process's tenant held its GPU, the elapsed time
 * asked for), which work the process queued between the two records, and
 * whether the end event can have fired before that work finished.
 *
 * Flags per timed window (docs/integrity.md):
 *   escaped          a kernel or graph launched in the window on a stream the
 *                    end event's stream never joined before the end record
 *                    (no cuStreamWaitEvent on an event recorded after it, no
 *                    synchronisation of its stream, its event or the context):
 *                    it may run after the end event;
 *   other_thread     a launch in the window from a thread other than the one
 *                    that recorded the end event;
 *   empty            no launch at all between the two records;
 *   stream_mismatch  launches in the window, none on the stream of either
 *                    event, and not all of them forked from the start and
 *                    joined to the end: some launch is on a stream never
 *                    ordered after the start record (no wait on an event
 *                    recorded after it on an ordered stream, no implicit
 *                    legacy-stream ordering, no host wait for the start), so
 *                    it may run before the start event fires, or it escaped.
 *                    Work that runs only on side streams forked from and
 *                    joined back to the events' stream is timed whole: clean.
 *
 * The elapsed time the driver returned for each judged window is kept for
 * its region (intercept_timing.c).
 *
 * KREX_INTEGRITY=0 in the environment turns the log off: no window is judged
 * and krex_region_integrity reports nothing (EXIT carries no counts, the
 * region's record is null).
 *
 * Fast path (a launch, a record, a stream wait, a host wait, while the
 * tenant holds its region): one atomic increment and six stores into a
 * fixed ring of operations. Outside a region nothing is logged. The analysis
 * runs at the elapsed-time query, under a mutex, walking the ring backwards
 * from the end record to the start record; a window longer than the ring is
 * judged on its last LOG_SLOTS operations (the ones that can escape). A
 * window whose operations the ring no longer holds, all or in part (its
 * elapsed time asked after more than LOG_SLOTS later operations, as a
 * harness does that records hundreds of windows and reads them all at the
 * end), is judged on what is left: what is seen to escape is flagged, but
 * absence is not evidence, so it is never `empty` or `stream_mismatch`, and
 * one of which nothing is left is not judged at all (not counted; the stats
 * note integrity_unjudged). The counts are kept per region (the gate's
 * generation), a few regions back.
 *
 * Streams are keys: a handle, 0 for the legacy default stream (NULL or
 * CU_STREAM_LEGACY), and a per-thread key for the per-thread default stream
 * (NULL in a _ptsz/_ptds call, or CU_STREAM_PER_THREAD). The legacy stream
 * and blocking streams wait for each other (CUDA's implicit
 * synchronisation), so work on one is joined to an end event on the other
 * unless cuStreamGetFlags says the stream is non-blocking.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "intercept_internal.h"

#define LOG_SLOTS 8192u /* power of two */
#define REGIONS 8u
#define JOIN_MAX 64u    /* streams and pending events one analysis tracks */
#define CARRIERS 256u   /* events that carry a window's start, one analysis */

enum op_kind { OP_NONE, OP_LAUNCH, OP_RECORD, OP_WAIT, OP_SYNC_STREAM, OP_SYNC_ALL, OP_SYNC_EVENT };

struct op_slot {
    uint64_t seq; /* 0 while being written */
    uintptr_t stream;
    uintptr_t event;
    uint32_t kind;
    uint32_t thread;
};
static struct op_slot oplog[LOG_SLOTS];
static uint64_t next_seq = 1;
static uint32_t next_thread = 1;
static KREX_TLS uint32_t thread_no;

struct region_counts {
    uint64_t region;
    uint64_t counts[KREX_INTEGRITY_COUNTS];
};
static struct region_counts regions[REGIONS];
static uint64_t last_region;
static pthread_mutex_t analysis_lock = PTHREAD_MUTEX_INITIALIZER;

#define LEGACY_KEY ((uintptr_t)0)
/* The special stream handles: CUDA's CU_STREAM_LEGACY and CU_STREAM_PER_THREAD;
 * HIP's hipStreamPerThread is the latter's value too. */
#define LEGACY_HANDLE ((uintptr_t)1)
#define PER_THREAD_HANDLE ((uintptr_t)2)

static uint32_t this_thread(void)
{
    if (thread_no == 0)
        thread_no = __atomic_fetch_add(&next_thread, 1, __ATOMIC_RELAXED);
    return thread_no;
}

static uintptr_t stream_key(const void *stream, int per_thread)
{
    uintptr_t s = (uintptr_t)stream;
    if (s == PER_THREAD_HANDLE || (s == 0 && per_thread))
        return ((uintptr_t)this_thread() << 4) | 2u; /* handles are aligned: no collision */
    if (s == LEGACY_HANDLE)
        return LEGACY_KEY;
    return s;
}

static bool per_thread_key(uintptr_t key)
{
    return (key & 0xfu) == 2u;
}

/* KREX_INTEGRITY=0 turns the log off (benchmarks/integrity_cost.py measures
 * with and without); read once per process. 1: on, 2: off. */
static int enabled;

static bool integrity_on(void)
{
    int e = __atomic_load_n(&enabled, __ATOMIC_RELAXED);
    if (e == 0) {
        const char *v = getenv(KREX_ENV_INTEGRITY);
        e = v != NULL && strcmp(v, "0") == 0 ? 2 : 1;
        __atomic_store_n(&enabled, e, __ATOMIC_RELAXED);
    }
    return e == 1;
}

bool krex_integrity_enabled(void)
{
    return integrity_on();
}

/* Appends one operation; 0 when the tenant holds no region (nothing logged). */
static uint64_t log_op(enum op_kind kind, uintptr_t stream, uintptr_t event)
{
    if (!integrity_on() || krex_current_region() == 0)
        return 0;
    uint64_t seq = __atomic_fetch_add(&next_seq, 1, __ATOMIC_RELAXED);
    struct op_slot *s = &oplog[seq & (LOG_SLOTS - 1)];
    __atomic_store_n(&s->seq, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&s->stream, stream, __ATOMIC_RELAXED);
    __atomic_store_n(&s->event, event, __ATOMIC_RELAXED);
    __atomic_store_n(&s->kind, (uint32_t)kind, __ATOMIC_RELAXED);
    __atomic_store_n(&s->thread, this_thread(), __ATOMIC_RELAXED);
    __atomic_store_n(&s->seq, seq, __ATOMIC_RELEASE);
    return seq;
}

/* The operation numbered `seq`, false when the ring has overwritten it. */
static bool read_op(uint64_t seq, struct op_slot *out)
{
    const struct op_slot *s = &oplog[seq & (LOG_SLOTS - 1)];
    if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != seq)
        return false;
    out->stream = __atomic_load_n(&s->stream, __ATOMIC_RELAXED);
    out->event = __atomic_load_n(&s->event, __ATOMIC_RELAXED);
    out->kind = __atomic_load_n(&s->kind, __ATOMIC_RELAXED);
    out->thread = __atomic_load_n(&s->thread, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq;
}

void krex_integrity_launch(const void *stream, int per_thread)
{
    log_op(OP_LAUNCH, stream_key(stream, per_thread), 0);
}

uint64_t krex_integrity_record(const void *event, const void *stream, int per_thread, uintptr_t *key,
                               uint32_t *thread)
{
    *key = stream_key(stream, per_thread);
    *thread = this_thread();
    return log_op(OP_RECORD, *key, (uintptr_t)event);
}

void krex_integrity_wait(const void *stream, const void *event, int per_thread)
{
    log_op(OP_WAIT, stream_key(stream, per_thread), (uintptr_t)event);
}

void krex_integrity_sync_stream(const void *stream, int per_thread)
{
    log_op(OP_SYNC_STREAM, stream_key(stream, per_thread), 0);
}

void krex_integrity_sync_all(void)
{
    log_op(OP_SYNC_ALL, 0, 0);
}

void krex_integrity_sync_event(const void *event)
{
    log_op(OP_SYNC_EVENT, 0, (uintptr_t)event);
}

/* ---- analysis ------------------------------------------------------------- */

struct cut {
    uintptr_t key;
    uint64_t before; /* work on this stream queued before this operation is joined */
};

struct analysis {
    struct cut cuts[JOIN_MAX];
    unsigned ncuts;
    uintptr_t pending[JOIN_MAX]; /* events some joined stream, or the host, waited on */
    unsigned npending;
    uint64_t all_before; /* a context synchronisation: everything before it is joined */
};

static uint64_t cut_of(const struct analysis *a, uintptr_t key)
{
    for (unsigned i = 0; i < a->ncuts; i++)
        if (a->cuts[i].key == key)
            return a->cuts[i].before;
    return 0;
}

static void join(struct analysis *a, uintptr_t key, uint64_t before)
{
    for (unsigned i = 0; i < a->ncuts; i++)
        if (a->cuts[i].key == key) {
            if (before > a->cuts[i].before)
                a->cuts[i].before = before;
            return;
        }
    if (a->ncuts < JOIN_MAX)
        a->cuts[a->ncuts++] = (struct cut){key, before};
}

static void add_pending(struct analysis *a, uintptr_t event)
{
    for (unsigned i = 0; i < a->npending; i++)
        if (a->pending[i] == event)
            return;
    if (a->npending < JOIN_MAX)
        a->pending[a->npending++] = event;
}

static bool take_pending(struct analysis *a, uintptr_t event)
{
    for (unsigned i = 0; i < a->npending; i++)
        if (a->pending[i] == event) {
            a->pending[i] = a->pending[--a->npending];
            return true;
        }
    return false;
}

/* A stream that waits for the legacy default stream and that stream for it. */
static bool blocking(uintptr_t key)
{
    if (key == LEGACY_KEY || per_thread_key(key))
        return true;
    return krex_stream_blocking((const void *)key); /* the vendor's stream flags */
}

/* Implicit synchronisation with the legacy default stream joins `launch` to `end`. */
static bool legacy_joined(uintptr_t launch, uintptr_t end)
{
    if (launch == end || (launch != LEGACY_KEY && end != LEGACY_KEY))
        return false;
    return blocking(launch == LEGACY_KEY ? end : launch);
}

/* ---- the start side: work that may run before the start event ------------ */

struct fork_state {
    uintptr_t start_stream;
    uintptr_t streams[JOIN_MAX]; /* ordered after the start record from here on */
    unsigned nstreams;
    /* Events recorded after the start on an ordered stream; when full the
     * oldest makes room (a fork waits on an event just recorded). */
    uintptr_t carriers[CARRIERS];
    unsigned ncarriers, oldest;
    bool all; /* the host waited for the start: all work queued since is after it */
};

static bool listed(const uintptr_t *set, unsigned n, uintptr_t x)
{
    for (unsigned i = 0; i < n; i++)
        if (set[i] == x)
            return true;
    return false;
}

static void add_to(uintptr_t *set, unsigned *n, uintptr_t x)
{
    if (!listed(set, *n, x) && *n < JOIN_MAX)
        set[(*n)++] = x;
}

static void drop_carrier(struct fork_state *f, uintptr_t event)
{
    for (unsigned i = 0; i < f->ncarriers; i++)
        if (f->carriers[i] == event) {
            f->carriers[i] = f->carriers[--f->ncarriers];
            f->oldest = 0; /* no longer full: the next ones go at the end */
            return;
        }
}

static void add_carrier(struct fork_state *f, uintptr_t event)
{
    if (listed(f->carriers, f->ncarriers, event))
        return;
    if (f->ncarriers < CARRIERS) {
        f->carriers[f->ncarriers++] = event;
    } else {
        f->carriers[f->oldest] = event;
        f->oldest = (f->oldest + 1) % CARRIERS;
    }
}

static bool forked(const struct fork_state *f, uintptr_t key)
{
    return f->all || listed(f->streams, f->nstreams, key) || legacy_joined(key, f->start_stream);
}

/* Whether a launch of the window is on a stream not ordered after the start
 * record, walking the window forwards (it must be whole in the log: a part
 * overwritten is no evidence, and says no). */
static bool started_early(const struct krex_window *w)
{
    struct fork_state f = {.start_stream = w->start_stream};
    add_to(f.streams, &f.nstreams, w->start_stream);
    struct op_slot op;
    if (read_op(w->start_seq, &op))
        add_carrier(&f, op.event); /* a stream may wait on the start event itself */
    for (uint64_t q = w->start_seq + 1; q < w->end_seq; q++) {
        if (!read_op(q, &op))
            return false;
        switch (op.kind) {
        case OP_RECORD:
            if (forked(&f, op.stream))
                add_carrier(&f, op.event);
            else
                drop_carrier(&f, op.event); /* recorded anew, not after the start */
            break;
        case OP_WAIT:
            if (listed(f.carriers, f.ncarriers, op.event))
                add_to(f.streams, &f.nstreams, op.stream);
            break;
        case OP_SYNC_STREAM:
            f.all = f.all || forked(&f, op.stream);
            break;
        case OP_SYNC_EVENT:
            f.all = f.all || listed(f.carriers, f.ncarriers, op.event);
            break;
        case OP_SYNC_ALL:
            f.all = true;
            break;
        case OP_LAUNCH:
            if (!forked(&f, op.stream))
                return true;
            break;
        default:
            break;
        }
    }
    return false;
}

static struct region_counts *counts_of(uint64_t region)
{
    struct region_counts *oldest = &regions[0];
    for (unsigned i = 0; i < REGIONS; i++) {
        if (regions[i].region == region)
            return &regions[i];
        if (regions[i].region < oldest->region)
            oldest = &regions[i];
    }
    *oldest = (struct region_counts){.region = region};
    return oldest;
}

void krex_integrity_window(uint64_t region, const struct krex_window *w, float ms)
{
    if (region == 0 || w->start_seq == 0 || w->end_seq == 0)
        return; /* a record the log did not take (outside a region) */
    unsigned flags = 0;
    uint64_t launches = 0, seen = 0;
    bool on_event_stream = false, partial = false;
    pthread_mutex_lock(&analysis_lock);
    if (w->end_seq > w->start_seq + 1) {
        struct analysis a = {.ncuts = 0};
        join(&a, w->end_stream, w->end_seq);
        uint64_t first = w->start_seq + 1;
        if (w->end_seq - first > LOG_SLOTS - 1) {
            first = w->end_seq - (LOG_SLOTS - 1);
            partial = true;
        }
        for (uint64_t q = w->end_seq - 1; q >= first; q--) {
            struct op_slot op;
            if (!read_op(q, &op)) {
                partial = true; /* overwritten by operations since: judge what is left */
                break;
            }
            seen++;
            switch (op.kind) {
            case OP_WAIT:
                if (cut_of(&a, op.stream) > q)
                    add_pending(&a, op.event);
                break;
            case OP_SYNC_EVENT:
                add_pending(&a, op.event);
                break;
            case OP_RECORD:
                if (take_pending(&a, op.event))
                    join(&a, op.stream, q);
                break;
            case OP_SYNC_STREAM:
                join(&a, op.stream, q);
                break;
            case OP_SYNC_ALL:
                if (q > a.all_before)
                    a.all_before = q;
                break;
            case OP_LAUNCH:
                launches++;
                if (op.stream == w->end_stream || op.stream == w->start_stream)
                    on_event_stream = true;
                if (op.thread != w->end_thread)
                    flags |= 1u << KREX_INTEGRITY_OTHER_THREAD;
                if (!(q < a.all_before || q < cut_of(&a, op.stream) || legacy_joined(op.stream, w->end_stream)))
                    flags |= 1u << KREX_INTEGRITY_ESCAPED;
                break;
            default:
                break;
            }
            if (q == first)
                break;
        }
    }
    if (partial && seen == 0) {
        pthread_mutex_unlock(&analysis_lock);
        krex_stats_note("integrity_unjudged");
        return;
    }
    if (launches == 0 && !partial)
        flags = 1u << KREX_INTEGRITY_EMPTY;
    else if (launches != 0 && !on_event_stream && !partial &&
             ((flags & (1u << KREX_INTEGRITY_ESCAPED)) || started_early(w)))
        flags |= 1u << KREX_INTEGRITY_STREAM_MISMATCH;
    struct region_counts *c = counts_of(region);
    c->counts[KREX_INTEGRITY_WINDOWS]++;
    for (unsigned f = KREX_INTEGRITY_ESCAPED; f < KREX_INTEGRITY_COUNTS; f++)
        if (flags & (1u << f))
            c->counts[f]++;
    last_region = region;
    krex_timing_note(region, ms, w->host_ms);
    pthread_mutex_unlock(&analysis_lock);
    if (flags)
        krex_stats_note("integrity_flagged");
}

KREX_EXPORT int krex_region_integrity(char *buf, size_t size)
{
    if (buf == NULL || size == 0)
        return -EINVAL;
    if (krex_gate_header() == NULL)
        return -ENODEV; /* no gate (not policy krex, or not under the runtime): nothing was judged */
    if (!integrity_on())
        return -ENOTSUP; /* KREX_INTEGRITY=0: nothing was logged, so nothing to say */
    uint64_t region = krex_current_region();
    uint64_t counts[KREX_INTEGRITY_COUNTS] = {0};
    pthread_mutex_lock(&analysis_lock);
    if (region == 0)
        region = last_region;
    for (unsigned i = 0; region != 0 && i < REGIONS; i++)
        if (regions[i].region == region)
            for (unsigned f = 0; f < KREX_INTEGRITY_COUNTS; f++)
                counts[f] = regions[i].counts[f];
    pthread_mutex_unlock(&analysis_lock);
    int n = snprintf(buf, size, "%llu,%llu,%llu,%llu,%llu", (unsigned long long)counts[0],
                     (unsigned long long)counts[1], (unsigned long long)counts[2], (unsigned long long)counts[3],
                     (unsigned long long)counts[4]);
    return n < 0 || (size_t)n >= size ? -ENOSPC : n;
}
