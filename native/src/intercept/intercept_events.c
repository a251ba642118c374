/*
 * Unprotected-timing detection: a benchmark that times with CUDA events
 * (cuEventRecord ... cuEventElapsedTime, directly or through cudart) is only
 * protected when both events were recorded inside one region of this
 * process's tenant. Under a gate (policy krex) every successful record notes
 * the region it happened in, and every successful elapsed time whose events
 * were recorded outside a region, in two different regions, or unknown to
 * the library (a full table evicted them) counts as one unprotected timing.
 *
 * The region of a record is read from the gate, not from the region client:
 * while this tenant holds its GPU (a region or a lease), the gate is closed
 * with this tenant as its holder, and the gate's generation (bumped at every
 * close) numbers the region. So C, Python and any other client count alike,
 * and a record counts as inside for as long as the GPU really is the
 * tenant's: from the grant until the runtime has reopened the gate after the
 * release (a moment after the client's exit returns: the other tenants are
 * still held back until then).
 *
 * The table is fixed-size and lock-free: open addressing on the CUevent
 * pointer, a bounded probe, a tombstone on destroy; when the probe finds no
 * room the home slot is overwritten (that event's timing then counts as
 * unprotected: it cannot be shown protected).
 *
 * The count reaches the runtime one byte per unprotected timing written to
 * the report named by KREX_UNPROTECTED_TIMINGS (the runtime makes one per
 * command, a pipe it reads as it goes; the bytes are the count), named when
 * each is counted, so a pooled command's count goes to its own report and
 * one killed by a signal loses nothing. Protected timings cost a table lookup and no system call.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "intercept_internal.h"

#define EVENT_SLOTS 4096u /* power of two */
#define EVENT_PROBE 16u
#define EMPTY ((uintptr_t)0)
#define TOMBSTONE ((uintptr_t)1)
#define OUTSIDE 0ull /* recorded while this tenant held no region */
/* Each process stops writing to the report after this many; the count it
 * keeps itself goes on. */
#define REPORT_MAX (1ull << 20)

struct event_slot {
    uintptr_t event;
    uint64_t region; /* the gate's generation while held, or OUTSIDE */
    /* Where the record is in the integrity log (intercept_integrity.c). A
     * record of the same event racing on two threads may mix these; the
     * program's own timing is undefined then too. */
    uint64_t seq;
    uintptr_t stream;
    uint32_t thread;
    uint64_t analysed; /* the end record whose window was analysed last (one verdict per window) */
};
static struct event_slot slots[EVENT_SLOTS];
static uint64_t unprotected;

int krex_track_enter(unsigned i)
{
    if (krex_depth++ > 0)
        return KREX_TOKEN_NESTED;
    krex_stats_count(i);
    return KREX_TOKEN_COUNTED;
}

void krex_track_leave(int token)
{
    (void)token;
    krex_depth--;
}

static unsigned home_of(uintptr_t x)
{
    x ^= x >> 17;
    x *= 0x9e3779b97f4a7c15ull;
    return (unsigned)(x >> 40) & (EVENT_SLOTS - 1);
}

static struct event_slot *find(uintptr_t key)
{
    unsigned home = home_of(key);
    for (unsigned n = 0; n < EVENT_PROBE; n++) {
        struct event_slot *s = &slots[(home + n) & (EVENT_SLOTS - 1)];
        uintptr_t k = __atomic_load_n(&s->event, __ATOMIC_ACQUIRE);
        if (k == key)
            return s;
        if (k == EMPTY)
            return NULL;
    }
    return NULL;
}

void krex_event_recorded(const void *event, const void *stream, int per_thread)
{
    if (krex_gate_header() == NULL || event == NULL)
        return; /* not under a gate: no regions to tell apart */
    uintptr_t key = (uintptr_t)event;
    uint64_t region = krex_current_region();
    uintptr_t skey;
    uint32_t thread;
    uint64_t seq = krex_integrity_record(event, stream, per_thread, &skey, &thread);
    struct event_slot *s = find(key);
    unsigned home = home_of(key);
    for (unsigned n = 0; s == NULL && n < EVENT_PROBE; n++) {
        struct event_slot *c = &slots[(home + n) & (EVENT_SLOTS - 1)];
        uintptr_t k = __atomic_load_n(&c->event, __ATOMIC_ACQUIRE);
        if ((k == EMPTY || k == TOMBSTONE) &&
            __atomic_compare_exchange_n(&c->event, &k, key, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            s = c;
    }
    if (s == NULL) { /* full around its home: evict */
        s = &slots[home];
        __atomic_store_n(&s->event, key, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&s->seq, seq, __ATOMIC_RELAXED);
    __atomic_store_n(&s->stream, skey, __ATOMIC_RELAXED);
    __atomic_store_n(&s->thread, thread, __ATOMIC_RELAXED);
    __atomic_store_n(&s->region, region, __ATOMIC_RELEASE);
}

void krex_event_destroyed(const void *event)
{
    struct event_slot *s = event != NULL ? find((uintptr_t)event) : NULL;
    if (s != NULL)
        __atomic_store_n(&s->event, TOMBSTONE, __ATOMIC_RELEASE);
}

static void report(void)
{
    const char *path = getenv(KREX_ENV_UNPROTECTED_TIMINGS);
    if (path == NULL || path[0] == '\0')
        return;
    /* Non-blocking: the report is a pipe the runtime drains; with no runtime
     * reading it (one that died) the open fails rather than waits, and a
     * pipe left full loses this count rather than stall the tenant. */
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return;
    ssize_t w = write(fd, "u", 1);
    (void)w;
    close(fd);
}

void krex_event_elapsed(const void *start, const void *end)
{
    if (krex_gate_header() == NULL)
        return;
    struct event_slot *a = find((uintptr_t)start), *b = find((uintptr_t)end);
    uint64_t ra = a != NULL ? __atomic_load_n(&a->region, __ATOMIC_ACQUIRE) : OUTSIDE;
    uint64_t rb = b != NULL ? __atomic_load_n(&b->region, __ATOMIC_ACQUIRE) : OUTSIDE;
    if (ra != OUTSIDE && ra == rb) {
        struct krex_window w = {
            .start_seq = __atomic_load_n(&a->seq, __ATOMIC_RELAXED),
            .end_seq = __atomic_load_n(&b->seq, __ATOMIC_RELAXED),
            .start_stream = __atomic_load_n(&a->stream, __ATOMIC_RELAXED),
            .end_stream = __atomic_load_n(&b->stream, __ATOMIC_RELAXED),
            .end_thread = __atomic_load_n(&b->thread, __ATOMIC_RELAXED),
        };
        /* A window asked for twice (a harness that re-reads its times) is judged once. */
        uint64_t key = w.end_seq ^ (w.start_seq << 32);
        if (__atomic_exchange_n(&b->analysed, key, __ATOMIC_RELAXED) != key)
            krex_integrity_window(ra, &w);
        return;
    }
    krex_stats_note("unprotected");
    if (__atomic_add_fetch(&unprotected, 1, __ATOMIC_RELAXED) <= REPORT_MAX)
        report();
}
