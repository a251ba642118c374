/*
 * Internal interfaces between the files of the interception library
 * (libkrex.so). Not installed, not a contract: include/krex_gate.h is the
 * contract with the runtime, include/krex.h the public API.
 *
 * Files, one concern each:
 *   intercept.c             real dlsym, the driver handle, real pointer -> wrapper map,
 *                           the exported dlsym
 *   intercept_cuda.c        what is CUDA's in that: the driver's name, the cu* names,
 *                           the resolvers, stream flags (the vendor hooks below)
 *   intercept_procaddr.c    cuGetProcAddress(_v2), cudaGetDriverEntryPoint(ByVersion)
 *   intercept_gated_table.c GENERATED typed wrappers of the gated entry points
 *   intercept_stats.c       per-process call counts, dumped at exit
 *   intercept_log.c         one-line messages to stderr
 *   gate_attach.c           the gate file (read-only) and this tenant's entries file: attach, claim an entry
 *   gate.c                  gate client: register (+ drain helper), pass / park, heartbeat
 *   gate_futex.c            futex and clock helpers
 *   drain.c                 drain helper threads (coordinator, worker)
 *   drain_cuda.c            what the CUDA drain synchronises: the contexts seen
 *   region_api.c            krex_region_enter / krex_region_exit
 *   intercept_events.c      CUDA events: which region each was recorded in, and
 *                           elapsed times that no region protected
 *   intercept_integrity.c   what each timed window held: launches, streams, threads,
 *                           joins; flags windows whose work may escape the end event
 *
 * Declares no CUDA types, so that the cudart shim can include it next to
 * cuda_runtime_api.h, and so that the HIP library (src/hip_intercept/)
 * links the same gate, drain, region client, stats, events and integrity
 * code: what differs per vendor is behind the vendor hooks below.
 */
#ifndef KREX_INTERCEPT_INTERNAL_H
#define KREX_INTERCEPT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "krex_gate.h"

#define KREX_EXPORT __attribute__((visibility("default")))
#define KREX_TLS __thread __attribute__((tls_model("initial-exec")))
/* For code the sanitizer runtimes run before they are initialised: ASan looks
 * up the functions it intercepts with dlsym, and ours is that dlsym. */
#define KREX_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

/* ---- the generated table (intercept_gated_table.c, hip_gated_table.c) ------ */
struct krex_gated_fn {
    const char *name;   /* exported symbol, sorted by name */
    int klass;          /* enum krex_call_class */
    void *wrapper;      /* our definition of that symbol */
};

extern const unsigned krex_gated_count;
extern const struct krex_gated_fn krex_gated_fns[];

/* ---- vendor hooks (intercept_cuda.c + drain_cuda.c, or src/hip_intercept/) - */
/* The driver library as a program loads it, by its sonames (NULL-terminated):
 * it is found with RTLD_NOLOAD, never loaded by us. */
extern const char *const krex_driver_sonames[];
/* Names the resolvers consider (cu[A-Z]..., hip[A-Z]...): run before the
 * sanitizers are initialised, like dlsym. */
KREX_NO_SANITIZE bool krex_is_api_name(const char *name);
/* A name whose pointer is handed out untouched (cuGetExportTable). */
bool krex_never_swapped(const char *name);
/* The resolvers this library wraps (cuGetProcAddress...): put(real, wrapper)
 * for each, given the driver's handle; and whether p is one of our wrappers. */
void krex_map_resolvers(void *driver, void (*put)(void *real, void *wrapper));
bool krex_is_resolver_wrapper(const void *p);
/* Whether work on `stream` is ordered with the legacy default stream (it is
 * not a non-blocking stream); false when the driver cannot say. */
bool krex_stream_blocking(const void *stream);
/* The drain worker: its per-thread setup (capture mode), one round of waiting
 * for everything this process submitted (KREX_DRAIN_*), and forgetting it all
 * in a forked child. krex_drain_note_context (below) is the vendor's too. */
void krex_drain_worker_init(void);
uint32_t krex_drain_sync_all(void);
void krex_drain_vendor_after_fork(void);

/* ---- intercept.c ---------------------------------------------------------- */
/* libc's dlsym, bypassing our own export. */
KREX_NO_SANITIZE void *krex_real_dlsym(void *handle, const char *name);
/* A symbol of the real driver (never one of our wrappers), or NULL when the
 * driver is not loaded or lacks it. */
void *krex_driver_symbol(const char *name);
/* Given what a resolver returned for `name`, the pointer to hand out: our
 * wrapper when `real` is a gated entry point (or a resolver), else `real`. */
void *krex_swap(const char *name, void *real);
/* Names the CUDA library considers: cu[A-Z]... (intercept_cuda.c) */
KREX_NO_SANITIZE bool krex_is_cu_name(const char *name);
/* Real pointer behind the i-th gated wrapper (resolved once). */
void *krex_gated_real(unsigned i);
/* This library's gated definition of `name` (a call through it meets the
 * gate), or NULL when the name is not gated. */
void *krex_gated_wrapper(const char *name);

/* Thread-local re-entrancy depth: while it is non-zero on a thread, wrappers
 * and resolvers pass straight through (calls made by the driver itself, by our
 * own initialisation, or by the drain helper). */
extern KREX_TLS int krex_depth;

/* ---- intercept_stats.c ---------------------------------------------------- */
#define KREX_GATED_MAX 512
void krex_stats_count(unsigned i);
void krex_stats_note(const char *what); /* a named event counter (swaps, unmapped) */
void krex_stats_after_fork(void);     /* the child counts its own calls only */

/* ---- intercept_log.c ------------------------------------------------------ */
void krex_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- gate_attach.c -------------------------------------------------------- */
/* This process's entry, attaching the gate and claiming the entry at the first
 * call; NULL when not under a gate. *registered_now says this call claimed it. */
struct krex_gate_proc *krex_gate_register(bool *registered_now);
/* This process's entry if it has one already (never attaches), else NULL. */
struct krex_gate_proc *krex_gate_self(void);
/* The attached gate's header (mapped read-only), or NULL; the first of a set. */
const struct krex_gate_header *krex_gate_header(void);
/* A command placed on a set of GPUs has a gate and an entry per GPU
 * (KREX_GATE_SET): how many (0 before registering), and the i-th of each. */
unsigned krex_gate_count(void);
const struct krex_gate_header *krex_gate_header_at(unsigned i);
struct krex_gate_proc *krex_gate_self_at(unsigned i);
int64_t krex_gate_tenant(void); /* KREX_TENANT_ID as read when attaching */
void krex_gate_attach_after_fork(void);

/* ---- gate.c --------------------------------------------------------------- */
/* Tokens returned by krex_gate_enter, handed back to krex_gate_leave. */
#define KREX_TOKEN_NESTED 0 /* re-entrant call: nothing done */
#define KREX_TOKEN_COUNTED 1 /* counted, no gate */
#define KREX_TOKEN_IN_CALL 2 /* counted and inside the gate (in_call held) */
int krex_gate_enter(unsigned i);
void krex_gate_leave(unsigned i, int token);

/* ---- intercept_events.c --------------------------------------------------- */
/* The class of the entry points wrapped to be watched, not gated (after the
 * classes of krex_gate.h, which the gate counts). */
#define KREX_CLASS_TRACKED KREX_CLASS_COUNT
/* Around a tracked call: counted in the stats, re-entrancy like a gated call
 * (returns KREX_TOKEN_NESTED inside another wrapped call). */
int krex_track_enter(unsigned i);
void krex_track_leave(int token);
/* Events are opaque pointers here (CUevent is a pointer type). */
void krex_event_recorded(const void *event, const void *stream, int per_thread);
/* After a successful elapsed-time query: `ms`, what the real driver returned. */
void krex_event_elapsed(const float *ms, const void *start, const void *end);
void krex_event_destroyed(const void *event);
/* The gate's generation while this tenant holds its GPU (a region or a
 * lease), else 0 (also when not under a gate). */
uint64_t krex_current_region(void);

/* ---- intercept_integrity.c ------------------------------------------------ */
/* Counts per region, in the order of krex_region_integrity's line (krex.h). */
enum krex_integrity_count {
    KREX_INTEGRITY_WINDOWS = 0, /* timed windows analysed */
    KREX_INTEGRITY_ESCAPED,
    KREX_INTEGRITY_OTHER_THREAD,
    KREX_INTEGRITY_EMPTY,
    KREX_INTEGRITY_STREAM_MISMATCH,
    KREX_INTEGRITY_COUNTS,
};
/* A timed window: where in the operation log its two records are. */
struct krex_window {
    uint64_t start_seq, end_seq; /* 0: not logged */
    uintptr_t start_stream, end_stream;
    uint32_t end_thread;
    double host_ms; /* the host's span from the start record call to the end record call (0: unknown) */
};
/* Hooks of the wrappers (streams and events are opaque pointers here);
 * per_thread: the call was a _ptsz/_ptds variant. Each logs only while the
 * tenant holds its region. */
void krex_integrity_launch(const void *stream, int per_thread);
void krex_integrity_wait(const void *stream, const void *event, int per_thread);
void krex_integrity_sync_stream(const void *stream, int per_thread);
void krex_integrity_sync_all(void);
void krex_integrity_sync_event(const void *event);
/* An event record: its log position (0: not logged), stream key and thread. */
uint64_t krex_integrity_record(const void *event, const void *stream, int per_thread, uintptr_t *key,
                               uint32_t *thread);
/* Analyses a window whose two events were recorded in `region`; `ms` is the
 * elapsed time the driver returned for it, kept once the window is judged. */
void krex_integrity_window(uint64_t region, const struct krex_window *w, float ms);
/* KREX_INTEGRITY=0 not set: windows are judged (read once per process). */
bool krex_integrity_enabled(void);

/* ---- intercept_timing.c --------------------------------------------------- */
/* Keeps the elapsed time of a judged window of `region` (krex_region_timing),
 * and whether the host paced it (host_ms: its host-side span, 0 unknown). */
void krex_timing_note(uint64_t region, float ms, double host_ms);

/* ---- gate_futex.c --------------------------------------------------------- */
uint64_t krex_now_ns(void); /* CLOCK_MONOTONIC */
/* Sleeps while *word == expected, at most timeout_ns (0: no bound). Shared,
 * not FUTEX_PRIVATE: the other side is another process. */
void krex_futex_wait(const uint32_t *word, uint32_t expected, uint64_t timeout_ns);
void krex_futex_wake_all(uint32_t *word);

/* ---- lazy_load.c ---------------------------------------------------------- */
/* Before a launch of `f` (a CUfunction or a CUkernel): loads its code in the
 * current context if lazy loading has not yet, as a module-class call. */
void krex_load_before_launch(void *f);

/* ---- drain.c -------------------------------------------------------------- */
/* Starts the drain helper for this process's entry (idempotent). */
void krex_drain_start(struct krex_gate_proc *entry);
/* Publishes in a gate entry how many contexts (devices, for HIP) the drain
 * would synchronise: in `entry`, or in each of this process's entries whose
 * drain helper started (one per GPU of the command's set). The vendor's
 * bookkeeping calls them under its own lock, so a later count never loses
 * to an earlier one. */
void krex_drain_publish_count(struct krex_gate_proc *entry, unsigned noted);
void krex_drain_publish_everywhere(unsigned noted);
/* The vendor's: once the entry is known, publish what is noted so far. */
void krex_drain_publish(struct krex_gate_proc *entry);
/* Records the calling thread's current context (device) for later drains,
 * after a gated call that passed the gate. */
void krex_drain_note_context(void);
/* Forget everything after fork(): the child has no helper and no contexts. */
void krex_drain_after_fork(void);

#endif /* KREX_INTERCEPT_INTERNAL_H */
