/*
 * krex_gate.h - the contract between the KREX runtime and the interception
 * library preloaded into tenants: the layout of a per-GPU gate in shared
 * memory and the protocol around it.
 *
 * The runtime creates one gate file per GPU (krex_runtime/regions/gate/core.py mirrors this
 * header and a test compares the two: change a layout only together with
 * KREX_GATE_VERSION). Tenants find it through KREX_GATE_PATH and identify
 * themselves with KREX_TENANT_ID.
 *
 * Files (version 2): the gate file holds the header alone, and only the
 * runtime may write it; tenants map it read-only (a FUTEX_WAIT needs no
 * write access). Each tenant's process entries live in a file of their own,
 * "<KREX_GATE_PATH>.<tenant id>" (KREX_GATE_ENTRIES_FMT), made by the runtime
 * before the tenant starts and writable by that tenant's user and the runtime
 * alone: max_procs entries from procs_offset. A tenant can thus neither move
 * the gate nor touch another tenant's entries; the runtime takes a process's
 * tenant from the file its entry is in, not from the entry's tenant_id.
 * (Version 1 had the header and every tenant's entries in one shared file.)
 *
 * Plain C types only; every field is naturally aligned and padding is spelt
 * out, so the Python mirror needs no compiler knowledge. Shared words are
 * accessed with __atomic builtins (C) or single aligned stores (Python).
 *
 * Protocol (tenant thread, before each gated driver call of class c):
 *   1. in_call += 1, in_class[c] += 1, and in_perturbing += 1 when c is
 *      perturbing                        (seq_cst read-modify-writes)
 *   2. w = gate_word                     (seq_cst)
 *   3. if ((w & KREX_GATE_CLOSED) or (closed_classes & (1 << c))) and holder
 *      != my tenant id and the runtime's heartbeat is fresh: withdraw the
 *      counts of step 1, park (spin, then FUTEX_WAIT on
 *      gate_word != w, bounded by park_wait_ns so the heartbeat is re-read),
 *      then start again at 1.
 *   4. call the real driver; withdraw the counts of step 1.
 * Runtime, to give the GPU to tenant H, first where another tenant is inside a
 * host-side call (context creation, module loading: each touches the device
 * and slowed a holder's trials, docs/BENCHMARKS.md), without stopping anyone's
 * GPU work yet:
 *   holder = H; closed_classes = host-side classes; gate_word += 2; full
 *   barrier; wait (bounded) until no entry but H's is inside a host-side call.
 * Then:
 *   holder = H; gate_word = (gate_word + 2) | CLOSED; generation += 1;
 *   full barrier; wait until in_perturbing == 0 (or in_call == 0, when told
 *   to wait for every call) in every live entry whose tenant is not H; for
 *   each such entry drain_req += 1 and FUTEX_WAKE(drain_req); wait
 *   (bounded) until drain_ack == drain_req. To reopen: gate_word = (gate_word
 *   + 2) & ~CLOSED; closed_classes = 0; holder = KREX_GATE_NO_HOLDER;
 *   FUTEX_WAKE(gate_word, all).
 * Steps 1-2 against the runtime's store-then-load make the check race-free:
 * either the runtime sees the thread inside, or the thread sees the gate shut.
 * A thread the runtime did not wait for (inside a host-side call) sees the
 * gate shut at its next gated call, whatever class that call is.
 */
#ifndef KREX_GATE_H
#define KREX_GATE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KREX_GATE_MAGIC 0x45544147584552ull /* "REXGATE\0" read as little-endian u64 */
#define KREX_GATE_VERSION 3u /* 2: the header alone in the gate file, each tenant's entries in a file of
                                 * its own; in_perturbing and in_class in the process entry;
                                 * 3: closed_classes in the header */

/* A tenant's entries file: printf(KREX_GATE_ENTRIES_FMT, gate path, tenant id). */
#define KREX_GATE_ENTRIES_FMT "%s.%lld"

/* Environment read by the library. */
#define KREX_ENV_GATE_PATH "KREX_GATE_PATH"          /* gate file of this tenant's GPU */
/* A command placed on a set of GPUs: the gate files of every GPU of its set,
 * ':'-separated, in ascending GPU order (the first is KREX_GATE_PATH). The
 * library takes an entry in each and parks while any of them is closed to
 * its tenant; each entry's drain request is answered by draining every
 * context of the process. Unset: KREX_GATE_PATH alone. */
#define KREX_ENV_GATE_SET "KREX_GATE_SET"
#define KREX_GATE_SET_MAX 8u /* gates in a set (the simulator's devices, a node's GPUs) */
#define KREX_ENV_TENANT_ID "KREX_TENANT_ID"          /* integer tenant id */
#define KREX_ENV_INTERCEPT_STATS "KREX_INTERCEPT_STATS" /* per-process call counts at exit */
#define KREX_ENV_DRAIN_TIMEOUT_MS "KREX_DRAIN_TIMEOUT_MS" /* overrides drain_timeout_ns */
#define KREX_ENV_REGION_SOCKET "KREX_REGION_SOCKET"  /* region channel (krex.h) */
#define KREX_ENV_REGION_TOKEN "KREX_REGION_TOKEN"    /* this tenant's secret for the channel's HELLO */
/* A file the runtime made for the command: one byte appended per unprotected
 * timing (an event elapsed time no single region of the tenant covered). */
#define KREX_ENV_UNPROTECTED_TIMINGS "KREX_UNPROTECTED_TIMINGS"
/* "0": no measurement-integrity bookkeeping in this process (benchmarks) */
#define KREX_ENV_INTEGRITY "KREX_INTEGRITY"

#define KREX_GATE_MAX_PROCS 256u /* default entries per tenant */
#define KREX_GATE_NO_HOLDER (-1)

/* gate_word: bit 0 says closed; the other bits count changes, so a parked
 * thread's FUTEX_WAIT(gate_word, w) returns as soon as anything changed. */
#define KREX_GATE_CLOSED 1u

/* Defaults the runtime writes at creation (the library falls back to them
 * when a field is 0). */
#define KREX_GATE_DEFAULT_STALE_NS 3000000000ull      /* heartbeat bound: 3 s */
#define KREX_GATE_DEFAULT_PARK_WAIT_NS 50000000ull    /* re-check heartbeat every 50 ms */
#define KREX_GATE_DEFAULT_SPIN_NS 20000ull            /* spin 20 us before sleeping */
#define KREX_GATE_DEFAULT_DRAIN_TIMEOUT_NS 10000000000ull /* drain gives up after 10 s */

/* Process entry states. Claimed FREE -> CLAIMING by CAS, filled in, then
 * published LIVE. A LIVE entry whose pid is dead is reaped by CAS LIVE ->
 * CLAIMING by whoever notices (the library when it needs a slot, the runtime). */
#define KREX_PROC_FREE 0u
#define KREX_PROC_CLAIMING 1u
#define KREX_PROC_LIVE 2u

/* drain_result values, written before drain_ack. */
#define KREX_DRAIN_OK 0u
#define KREX_DRAIN_TIMED_OUT 1u  /* a context did not finish within the bound */
#define KREX_DRAIN_ERROR 2u      /* a synchronise failed (sticky error, dead context) */

/* Classes of gated calls, counted per process in shared memory. The generated
 * table (native/src/intercept/intercept_gated_table.c) assigns each function one.
 *
 * What a call can do to a region holder's timing decides whether region entry
 * waits for a thread that is inside it when the gate closes
 * (KREX_CLASS_PERTURBING below, reasons in native/tools/gen_gated_table.py):
 *   submits GPU work   launches, host functions, graphs, async copies and
 *                      memsets, event records and waits, stream memory
 *                      operations, stream-ordered allocation, external
 *                      semaphores: until the call returns it may put work on
 *                      the device, so entry waits (these calls only enqueue:
 *                      microseconds);
 *   moves memory       synchronous copies and memsets: the transfer runs on the
 *                      device during the call (after the work queued before
 *                      it, which the drain would wait for anyway), so entry
 *                      waits;
 *   host-side          context creation, module loading, memory allocation
 *                      and release: no work of the tenant's
 *                      reaches a stream, but the driver's own work for them
 *                      (page tables, scrubbing, channels) slowed a holder's
 *                      trials on the H100 (docs/BENCHMARKS.md); entry lets
 *                      those in progress finish before it closes the gate
 *                      (bounded), and does not wait for them at the close.
 *                      The thread finishes its call outside the critical path
 *                      and parks at its next gated call. */
enum krex_call_class {
    KREX_CLASS_LAUNCH = 0,    /* kernel launches (cuLaunchKernel*, cooperative, legacy) */
    KREX_CLASS_HOST_FUNC = 1, /* cuLaunchHostFunc, cuStreamAddCallback */
    KREX_CLASS_GRAPH = 2,     /* cuGraphLaunch, cuGraphUpload */
    KREX_CLASS_MEMCPY = 3,    /* asynchronous copies (cuMemcpy*Async) */
    KREX_CLASS_MEMSET = 4,    /* asynchronous memsets (cuMemset*Async) */
    KREX_CLASS_EVENT = 5,     /* cuEventRecord*, cuStreamWaitEvent */
    KREX_CLASS_STREAM_MEMOP = 6, /* cuStreamWaitValue*, WriteValue*, BatchMemOp */
    KREX_CLASS_MEM_ASYNC = 7, /* stream-ordered allocation, prefetch, discard */
    KREX_CLASS_CONTEXT = 8,   /* context creation, primary context retain */
    KREX_CLASS_MODULE = 9,    /* module and library loading */
    KREX_CLASS_OTHER = 10,    /* other stream submissions (external semaphores, ...) */
    KREX_CLASS_MEMCPY_SYNC = 11, /* synchronous copies (cuMemcpy, cuMemcpyHtoD, ...) */
    KREX_CLASS_MEMSET_SYNC = 12, /* synchronous memsets (cuMemsetD8, ...) */
    KREX_CLASS_MEMORY = 13,   /* device and pinned host memory: allocation, release, mapping */
    KREX_CLASS_COUNT = 14,
};
#define KREX_CLASS_SLOTS 16 /* room in the entry; classes beyond COUNT read 0 */

/* Bit c set: a thread inside a call of class c may perturb a region holder,
 * and region entry waits for it (in_perturbing counts those threads). */
#define KREX_CLASS_BIT(c) (1u << (c))
#define KREX_CLASS_PERTURBING                                                                       \
    (KREX_CLASS_BIT(KREX_CLASS_LAUNCH) | KREX_CLASS_BIT(KREX_CLASS_HOST_FUNC) |                      \
     KREX_CLASS_BIT(KREX_CLASS_GRAPH) | KREX_CLASS_BIT(KREX_CLASS_MEMCPY) |                          \
     KREX_CLASS_BIT(KREX_CLASS_MEMSET) | KREX_CLASS_BIT(KREX_CLASS_EVENT) |                          \
     KREX_CLASS_BIT(KREX_CLASS_STREAM_MEMOP) | KREX_CLASS_BIT(KREX_CLASS_MEM_ASYNC) |                \
     KREX_CLASS_BIT(KREX_CLASS_OTHER) | KREX_CLASS_BIT(KREX_CLASS_MEMCPY_SYNC) |                     \
     KREX_CLASS_BIT(KREX_CLASS_MEMSET_SYNC))

/* One entry per process that made a gated call. 256 bytes, its own cache
 * lines, so one process's counters do not slow another's. */
struct krex_gate_proc {
    uint32_t state;          /* KREX_PROC_*; CAS only */
    int32_t pid;
    int64_t tenant_id;
    uint64_t start_time;     /* /proc/<pid>/stat field 22, to tell pid reuse */
    uint32_t in_call;        /* threads inside a gated driver call now */
    uint32_t parked;         /* threads parked at the gate now */
    uint32_t drain_req;      /* runtime bumps it; futex the drain thread waits on */
    uint32_t drain_ack;      /* library copies drain_req here when drained; futex */
    uint32_t drain_result;   /* KREX_DRAIN_* of the last acknowledged drain */
    uint32_t uses_cuda;      /* 1 once a context was seen in this process */
    uint32_t contexts;       /* contexts the drain thread synchronises */
    uint32_t fail_open;      /* 1 once the library let a call through a stale gate */
    uint64_t calls_total;    /* gated calls that passed the gate, all classes */
    uint64_t parks_total;    /* times a thread parked */
    uint64_t drains_total;   /* drains acknowledged */
    uint64_t calls[KREX_CLASS_SLOTS]; /* gated calls per enum krex_call_class */
    uint64_t drain_ack_ns;   /* CLOCK_MONOTONIC when the last drain was acknowledged */
    /* Announced like in_call (both before the gate is read, both withdrawn on
     * parking): threads inside a call of a KREX_CLASS_PERTURBING class, and
     * threads inside a call per class (what entry waited for, or let run). */
    uint32_t in_perturbing;
    uint16_t in_class[KREX_CLASS_SLOTS];
    uint8_t reserved[4];
};

/* The gate header: the whole gate file. A tenant's entries file holds
 * max_procs process entries from procs_offset. */
struct krex_gate_header {
    uint64_t magic;          /* KREX_GATE_MAGIC, written last at creation */
    uint32_t version;        /* KREX_GATE_VERSION */
    uint32_t header_size;    /* sizeof(struct krex_gate_header) */
    uint32_t proc_size;      /* sizeof(struct krex_gate_proc) */
    uint32_t max_procs;      /* entries in each tenant's entries file */
    uint32_t procs_offset;   /* byte offset of procs[0] in an entries file */
    uint32_t gate_word;      /* futex: KREX_GATE_CLOSED | change count */
    int64_t holder;          /* tenant allowed through while closed, or NO_HOLDER */
    uint64_t generation;     /* bumped at every close */
    uint64_t heartbeat_ns;   /* runtime's CLOCK_MONOTONIC stamp */
    uint64_t stale_after_ns; /* heartbeat older than this: the gate fails open */
    uint64_t park_wait_ns;   /* longest single futex sleep of a parked thread */
    uint64_t spin_ns;        /* spin this long before sleeping */
    uint64_t drain_timeout_ns; /* drain thread gives up after this */
    int32_t runtime_pid;     /* diagnostics */
    uint32_t reserved0;
    uint64_t closed_at_ns;   /* CLOCK_MONOTONIC of the last close (diagnostics) */
    uint64_t opened_at_ns;   /* CLOCK_MONOTONIC of the last open (diagnostics) */
    uint32_t closed_classes; /* KREX_CLASS_BIT of each class closed to all but the holder, the gate open */
    uint8_t reserved[140];
};

#ifndef __cplusplus
_Static_assert(sizeof(struct krex_gate_proc) == 256, "gate process entry is 256 bytes");
_Static_assert(sizeof(struct krex_gate_header) == 256, "gate header is 256 bytes");
#endif

/* Sizes of the gate file and of an entries file with n process entries. */
#define KREX_GATE_FILE_SIZE sizeof(struct krex_gate_header)
#define KREX_GATE_ENTRIES_SIZE(n) ((uint64_t)(n) * sizeof(struct krex_gate_proc))

#ifdef __cplusplus
}
#endif

#endif /* KREX_GATE_H */
