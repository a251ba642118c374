/*
 * Gate client: every gated driver call passes here first (krex_gate_enter)
 * and after (krex_gate_leave). The protocol is in include/krex_gate.h; in
 * short: announce (in_call += 1), then look at the gate; if it is closed for
 * us, withdraw and park *before* entering the driver, so a parked thread holds
 * no driver lock.
 *
 * Attaching the gate file and claiming our entry is gate_attach.c's; this
 * file adds what a registered process does: start its drain helper, note the
 * contexts its calls used, pass or park. A stale runtime heartbeat lets
 * parked threads through (said once on stderr): a dead runtime never hangs
 * tenants.
 */
#include <pthread.h>

#include "intercept_internal.h"

static int stale_reported;

/* ---- registering ---------------------------------------------------------- */

static struct krex_gate_proc *registered_entry(void)
{
    bool registered_now;
    struct krex_gate_proc *e = krex_gate_register(&registered_now);
    if (registered_now)
        for (unsigned g = 0; g < krex_gate_count(); g++)
            krex_drain_start(krex_gate_self_at(g));
    return e;
}

/* ---- passing and parking -------------------------------------------------- */

static uint64_t field_or(uint64_t v, uint64_t fallback)
{
    return v ? v : fallback;
}

/* A dead or hung runtime must never hang tenants. */
static bool heartbeat_stale(const struct krex_gate_header *gate, struct krex_gate_proc *e)
{
    uint64_t beat = __atomic_load_n(&gate->heartbeat_ns, __ATOMIC_ACQUIRE);
    uint64_t bound = field_or(__atomic_load_n(&gate->stale_after_ns, __ATOMIC_RELAXED),
                              KREX_GATE_DEFAULT_STALE_NS);
    uint64_t now = krex_now_ns();
    if (now <= beat || now - beat <= bound)
        return false;
    if (!__atomic_exchange_n(&stale_reported, 1, __ATOMIC_ACQ_REL))
        krex_log("runtime heartbeat stale for %llu ms; gate failing open",
                 (unsigned long long)((now - beat) / 1000000ull));
    if (!__atomic_load_n(&e->fail_open, __ATOMIC_RELAXED)) {
        __atomic_store_n(&e->fail_open, 1, __ATOMIC_RELAXED);
        krex_stats_note("fail_open");
    }
    return true;
}

static bool closed_for_us(const struct krex_gate_header *gate, uint32_t word, unsigned klass)
{
    bool closed = (word & KREX_GATE_CLOSED) ||
                  (__atomic_load_n(&gate->closed_classes, __ATOMIC_SEQ_CST) & KREX_CLASS_BIT(klass));
    return closed && __atomic_load_n(&gate->holder, __ATOMIC_SEQ_CST) != krex_gate_tenant();
}

/* Waits until the gate word moves away from `word` or the heartbeat goes
 * stale. Spins briefly first: a region is often short and a futex round trip
 * is not free. */
static void park(const struct krex_gate_header *gate, struct krex_gate_proc *e, uint32_t word)
{
    __atomic_fetch_add(&e->parked, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&e->parks_total, 1, __ATOMIC_RELAXED);
    krex_stats_note("parked");
    uint64_t spin_until = krex_now_ns() + field_or(gate->spin_ns, KREX_GATE_DEFAULT_SPIN_NS);
    while (__atomic_load_n(&gate->gate_word, __ATOMIC_ACQUIRE) == word && krex_now_ns() < spin_until)
        __builtin_ia32_pause();
    while (__atomic_load_n(&gate->gate_word, __ATOMIC_ACQUIRE) == word && !heartbeat_stale(gate, e))
        krex_futex_wait(&gate->gate_word, word, field_or(gate->park_wait_ns, KREX_GATE_DEFAULT_PARK_WAIT_NS));
    __atomic_fetch_sub(&e->parked, 1, __ATOMIC_SEQ_CST);
}

/* The announcement of krex_gate_enter's step 1 (krex_gate.h), and its
 * withdrawal: in_call for "inside at all", in_class for what entry reports,
 * in_perturbing for what entry waits for. */
static void announce(struct krex_gate_proc *e, unsigned klass)
{
    __atomic_fetch_add(&e->in_call, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&e->in_class[klass], 1, __ATOMIC_SEQ_CST);
    if (KREX_CLASS_PERTURBING & KREX_CLASS_BIT(klass))
        __atomic_fetch_add(&e->in_perturbing, 1, __ATOMIC_SEQ_CST);
}

static void withdraw(struct krex_gate_proc *e, unsigned klass)
{
    if (KREX_CLASS_PERTURBING & KREX_CLASS_BIT(klass))
        __atomic_fetch_sub(&e->in_perturbing, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&e->in_class[klass], 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&e->in_call, 1, __ATOMIC_SEQ_CST);
}

static unsigned class_of(unsigned i)
{
    unsigned klass = (unsigned)krex_gated_fns[i].klass;
    return klass < KREX_CLASS_COUNT ? klass : KREX_CLASS_OTHER;
}

/* The gate of the set closed to us now (its word in *word), or -1: a command
 * placed on several GPUs passes only when every one of its gates lets it. */
static int closed_gate(unsigned n, unsigned klass, uint32_t *word)
{
    for (unsigned g = 0; g < n; g++) {
        const struct krex_gate_header *gate = krex_gate_header_at(g);
        uint32_t w = __atomic_load_n(&gate->gate_word, __ATOMIC_SEQ_CST);
        if (closed_for_us(gate, w, klass) && !heartbeat_stale(gate, krex_gate_self_at(g))) {
            *word = w;
            return (int)g;
        }
    }
    return -1;
}

int krex_gate_enter(unsigned i)
{
    if (krex_depth++ > 0)
        return KREX_TOKEN_NESTED;
    krex_stats_count(i);
    struct krex_gate_proc *e = registered_entry();
    if (e == NULL)
        return KREX_TOKEN_COUNTED;
    unsigned n = krex_gate_count();
    unsigned klass = class_of(i);
    for (;;) {
        /* Announce first (in every gate's entry), then look: against the
         * runtime's "close, then read in_call" this leaves no window where
         * both miss each other. */
        for (unsigned g = 0; g < n; g++)
            announce(krex_gate_self_at(g), klass);
        uint32_t word = 0;
        int closed = closed_gate(n, klass, &word);
        if (closed < 0) {
            /* Counted as it passes, so the counters say what reached the
             * driver: a region's holder can check nobody else's did. */
            for (unsigned g = 0; g < n; g++) {
                struct krex_gate_proc *mine = krex_gate_self_at(g);
                __atomic_fetch_add(&mine->calls[klass], 1, __ATOMIC_RELAXED);
                __atomic_fetch_add(&mine->calls_total, 1, __ATOMIC_RELAXED);
            }
            return KREX_TOKEN_IN_CALL;
        }
        for (unsigned g = 0; g < n; g++)
            withdraw(krex_gate_self_at(g), klass);
        park(krex_gate_header_at((unsigned)closed), krex_gate_self_at((unsigned)closed), word);
    }
}

void krex_gate_leave(unsigned i, int token)
{
    if (token == KREX_TOKEN_IN_CALL) {
        for (unsigned g = 0; g < krex_gate_count(); g++)
            withdraw(krex_gate_self_at(g), class_of(i));
        krex_drain_note_context();
    }
    krex_depth--;
}

/* ---- fork ----------------------------------------------------------------- */

/* The child registers itself anew at its first gated call and starts its own
 * drain helper. */
static void after_fork_in_child(void)
{
    krex_gate_attach_after_fork();
    stale_reported = 0;
    krex_drain_after_fork();
    krex_stats_after_fork();
}

__attribute__((constructor)) static void gate_init(void)
{
    pthread_atfork(NULL, NULL, after_fork_in_child);
}
