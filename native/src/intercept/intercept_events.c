/*
 * Unprotected-timing detection: a benchmark that times with CUDA events
 * (cuEventRecord ... cuEventElapsedTime, directly or through cudart) is only
 * protected when both events were recorded inside one region of this
 * process's tenant. Under a gate (policy krex) every successful record notes
 * the region it happened in, and every successful elapsed time whose events
 * were recorded outside a region, in two different regions, or never under
 * the library's watch counts as one unprotected timing.
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
 * The table is lock-free open addressing on the CUevent pointer, a bounded
 * probe, a tombstone on destroy, in segments: the first (4096 slots) is
 * static; when a record finds no room around its home in any segment there
 * is, the next one is allocated (8192 slots each, up to SEGMENTS in all:
 * 36864 slots, 1.7 MiB at most, only in a process that holds that many live
 * events). A harness that records hundreds of windows and reads every
 * elapsed time at the end (triton's do_bench: thousands of live events) is
 * tracked whole. A record that still finds no room (tens of thousands of
 * live events) evicts nothing: it is dropped, and when it was made inside a
 * region its event is marked in a small bitmap (one bit per home slot). A
 * timing with such an event is `untracked`, known neither protected nor
 * unprotected, and counted apart; one with an event known to be recorded
 * outside a region stays unprotected, whatever the other.
 *
 * The counts reach the runtime one byte per timing written to the report
 * named by KREX_UNPROTECTED_TIMINGS (the runtime makes one per command, a
 * pipe it reads as it goes): `u` per unprotected timing, `t` per untracked
 * one (the runtime counts every other byte unprotected, as libraries before
 * `t` wrote `u` only). The report is named when each is counted, so a pooled
 * command's count goes to its own report and one killed by a signal loses
 * nothing. Protected timings cost a table lookup and no system call.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "intercept_internal.h"

#define FIRST_SLOTS 4096u /* the static segment; powers of two */
#define MORE_SLOTS 8192u  /* each segment allocated after it */
#define SEGMENTS 5u
#define EVENT_PROBE 16u
#define EMPTY ((uintptr_t)0)
#define TOMBSTONE ((uintptr_t)1)
#define OUTSIDE 0ull              /* recorded while this tenant held no region */
#define UNTRACKED (~(uint64_t)0)  /* recorded inside a region while no slot was free */
#define DROPPED_BITS (1u << 16)   /* the bitmap of records dropped inside a region: 8 KiB */
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
    uint64_t host_ns;  /* CLOCK_MONOTONIC at the record call: a window's host-side span */
};
static struct event_slot first_segment[FIRST_SLOTS];
/* Segment i (0: the static one); a segment, once there, stays until exit. */
static struct event_slot *segments[SEGMENTS] = {first_segment};
static uint64_t dropped[DROPPED_BITS / 64];
static uint64_t unprotected, untracked;

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

static uint64_t hash_of(uintptr_t x)
{
    x ^= x >> 17;
    x *= 0x9e3779b97f4a7c15ull;
    return x >> 32;
}

static unsigned slots_of(unsigned segment)
{
    return segment == 0 ? FIRST_SLOTS : MORE_SLOTS;
}

static struct event_slot *slot_at(struct event_slot *seg, unsigned segment, uint64_t hash, unsigned n)
{
    return &seg[(hash + n) & (slots_of(segment) - 1)];
}

/* A key lives in the first segment whose probe window had room when it was
 * recorded; an EMPTY slot never comes back once used, so a window with an
 * EMPTY slot and no key ends the search. */
static struct event_slot *find(uintptr_t key)
{
    uint64_t hash = hash_of(key);
    for (unsigned g = 0; g < SEGMENTS; g++) {
        struct event_slot *seg = __atomic_load_n(&segments[g], __ATOMIC_ACQUIRE);
        if (seg == NULL)
            return NULL;
        for (unsigned n = 0; n < EVENT_PROBE; n++) {
            struct event_slot *s = slot_at(seg, g, hash, n);
            uintptr_t k = __atomic_load_n(&s->event, __ATOMIC_ACQUIRE);
            if (k == key)
                return s;
            if (k == EMPTY)
                return NULL;
        }
    }
    return NULL;
}

static struct event_slot *segment(unsigned g)
{
    struct event_slot *seg = __atomic_load_n(&segments[g], __ATOMIC_ACQUIRE);
    if (seg != NULL)
        return seg;
    struct event_slot *fresh = calloc(MORE_SLOTS, sizeof *fresh);
    if (fresh == NULL)
        return NULL;
    if (__atomic_compare_exchange_n(&segments[g], &seg, fresh, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return fresh;
    free(fresh); /* another thread's came first */
    return seg;
}

/* A free slot for `key` (not in the table), NULL when none is left. */
static struct event_slot *claim(uintptr_t key)
{
    uint64_t hash = hash_of(key);
    for (unsigned g = 0; g < SEGMENTS; g++) {
        struct event_slot *seg = segment(g);
        if (seg == NULL)
            return NULL;
        for (unsigned n = 0; n < EVENT_PROBE; n++) {
            struct event_slot *c = slot_at(seg, g, hash, n);
            uintptr_t k = __atomic_load_n(&c->event, __ATOMIC_ACQUIRE);
            if ((k == EMPTY || k == TOMBSTONE) &&
                __atomic_compare_exchange_n(&c->event, &k, key, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                return c;
        }
    }
    return NULL;
}

static unsigned dropped_bit(uintptr_t key)
{
    return (unsigned)hash_of(key) & (DROPPED_BITS - 1);
}

static bool was_dropped(uintptr_t key)
{
    unsigned b = dropped_bit(key);
    return (__atomic_load_n(&dropped[b / 64], __ATOMIC_ACQUIRE) >> (b % 64)) & 1u;
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
    if (s == NULL)
        s = claim(key);
    if (s == NULL) {
        /* No room: nothing is evicted (another event's timing would turn
         * unknown). Inside a region, a timing with this event is untracked;
         * outside, it is unprotected whatever the table knows. */
        krex_stats_note("event_table_full");
        if (region != OUTSIDE) {
            unsigned b = dropped_bit(key);
            __atomic_fetch_or(&dropped[b / 64], 1ull << (b % 64), __ATOMIC_RELEASE);
        }
        return;
    }
    __atomic_store_n(&s->seq, seq, __ATOMIC_RELAXED);
    __atomic_store_n(&s->stream, skey, __ATOMIC_RELAXED);
    __atomic_store_n(&s->thread, thread, __ATOMIC_RELAXED);
    __atomic_store_n(&s->host_ns, region != OUTSIDE ? krex_now_ns() : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->region, region, __ATOMIC_RELEASE);
}

void krex_event_destroyed(const void *event)
{
    struct event_slot *s = event != NULL ? find((uintptr_t)event) : NULL;
    if (s != NULL)
        __atomic_store_n(&s->event, TOMBSTONE, __ATOMIC_RELEASE);
}

static void report(const char *byte)
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
    ssize_t w = write(fd, byte, 1);
    (void)w;
    close(fd);
}

/* The region an event was recorded in: OUTSIDE for one the table does not
 * know (never recorded under the gate's watch), UNTRACKED for one whose
 * record inside a region found no room. */
static uint64_t region_of(const struct event_slot *s, uintptr_t key)
{
    if (s != NULL)
        return __atomic_load_n(&s->region, __ATOMIC_ACQUIRE);
    return was_dropped(key) ? UNTRACKED : OUTSIDE;
}

void krex_event_elapsed(const float *ms, const void *start, const void *end)
{
    if (krex_gate_header() == NULL)
        return;
    struct event_slot *a = find((uintptr_t)start), *b = find((uintptr_t)end);
    uint64_t ra = region_of(a, (uintptr_t)start), rb = region_of(b, (uintptr_t)end);
    if (ra != OUTSIDE && rb != OUTSIDE && (ra == UNTRACKED || rb == UNTRACKED)) {
        krex_stats_note("untracked");
        if (__atomic_add_fetch(&untracked, 1, __ATOMIC_RELAXED) <= REPORT_MAX)
            report("t");
        return;
    }
    if (ra != OUTSIDE && ra == rb) {
        struct krex_window w = {
            .start_seq = __atomic_load_n(&a->seq, __ATOMIC_RELAXED),
            .end_seq = __atomic_load_n(&b->seq, __ATOMIC_RELAXED),
            .start_stream = __atomic_load_n(&a->stream, __ATOMIC_RELAXED),
            .end_stream = __atomic_load_n(&b->stream, __ATOMIC_RELAXED),
            .end_thread = __atomic_load_n(&b->thread, __ATOMIC_RELAXED),
        };
        uint64_t t0 = __atomic_load_n(&a->host_ns, __ATOMIC_RELAXED), t1 = __atomic_load_n(&b->host_ns, __ATOMIC_RELAXED);
        w.host_ms = t0 != 0 && t1 > t0 ? (double)(t1 - t0) / 1e6 : 0.0;
        /* A window asked for twice (a harness that re-reads its times) is judged once. */
        uint64_t key = w.end_seq ^ (w.start_seq << 32);
        if (__atomic_exchange_n(&b->analysed, key, __ATOMIC_RELAXED) != key)
            krex_integrity_window(ra, &w, ms != NULL ? *ms : 0.0f);
        return;
    }
    krex_stats_note("unprotected");
    if (__atomic_add_fetch(&unprotected, 1, __ATOMIC_RELAXED) <= REPORT_MAX)
        report("u");
}
