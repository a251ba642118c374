/*
 * Internal interfaces between the files of the simulated CUDA driver.
 * Not installed, not a contract: see include/krex_simcuda.h for that.
 *
 * Files, one concern each:
 *   simcuda_device.c      shared simulated device: shm, process slots, reaping,
 *                         contention (processor sharing), memory accounting
 *   simcuda_heat.c        what the device's sensors tell: busy time, temperature,
 *                         the SM clock its kernels run at
 *   simcuda_context.c     each thread's context stack, context init, pending work
 *   simcuda_stream.c      streams, events, per-stream worker threads
 *   simcuda_lock.c        checkpoint lock: the target-side gate and the locker
 *   simcuda_log.c         execution log writer
 *   simcuda_api_device.c  entry points: init, version, devices, error names
 *   simcuda_api_context.c entry points: primary contexts, contexts
 *   simcuda_api_memory.c  entry points: allocations, copies, memsets
 *   simcuda_api_launch.c  entry points: modules, launches, host functions
 *   simcuda_api_stream.c  entry points: streams, events
 *   simcuda_api_graph.c   entry points: graphs (built by hand or captured from
 *                         a stream), stream capture
 *   simcuda_procaddr.c    cuGetProcAddress
 *   simcuda_entry_points.txt  the entry points not written by hand: aliases (the
 *                         same function under a _v2/_ptsz/_ptds name) and those
 *                         answering CUDA_ERROR_NOT_SUPPORTED; from it the build
 *                         generates their wrappers and the cuGetProcAddress
 *                         table (tools/gen_simcuda_entry_points.py)
 *
 * The entry points (simcuda_api_*.c) are thin gated wrappers (SIM_GATED: the
 * checkpoint lock can hold them) around static implementations, which never
 * call exported functions, so a preloaded interception library sees exactly
 * the application's calls. (A generated alias calls its entry point, but the
 * library is linked with -Bsymbolic-functions: that call stays inside it.)
 */
#ifndef KREX_SIMCUDA_INTERNAL_H
#define KREX_SIMCUDA_INTERNAL_H

/* Declares the legacy and per-thread-stream entry points as well, so that
 * every exported definition is checked against its cuda.h prototype. */
#define __CUDA_API_VERSION_INTERNAL 1
/* cuda.h then wraps its prototypes in `visibility push(default)`: exactly the
 * driver API is exported; everything else is hidden (-fvisibility=hidden). */
#define __CUDA_API_PUSH_VISIBILITY_DEFAULT 1
#include <cuda.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "krex_simcuda.h"

#define SIM_DRIVER_VERSION 13000

/* ---- time ---------------------------------------------------------------- */
uint64_t sim_now_ns(void); /* CLOCK_MONOTONIC */
/* Sleeps the milliseconds the environment variable says (unset: none). */
void sim_host_latency(const char *env_name);

/* ---- process state (simcuda_device.c) ------------------------------------ */
struct sim_process {
    struct krex_sim_shm *shm;           /* mapped shared device, NULL until attached */
    struct krex_sim_proc_slot *slot;    /* our slot, NULL until cuInit */
    int pid;
    int tenant_id;
    int visible_count;                  /* devices after CUDA_VISIBLE_DEVICES */
    int visible[KREX_SIM_MAX_DEVICES];  /* visible ordinal -> physical index */
    uint64_t copy_ns_per_mb;            /* simulated ns per 1e6 bytes */
};
extern struct sim_process sim_proc;
/* /proc/<pid>/stat's state and start time; false if the process is gone. */
bool sim_read_proc_stat(int pid, char *state, uint64_t *start_time);

/* Maps the shared device named by KREX_SIM_DEVICE (creating it race-free if
 * needed). Idempotent, thread-safe. Does not claim a slot. */
CUresult sim_attach(void);
/* cuInit: attach, claim our slot, compute visible devices. Idempotent. */
CUresult sim_init(void);
bool sim_initialized(void);
/* The process was forked after initialising: the child may not use CUDA. */
bool sim_forked(void);

/* Slot of a live process, or NULL. */
struct krex_sim_proc_slot *sim_find_slot(int pid);
bool sim_slot_alive(const struct krex_sim_proc_slot *slot, int pid);
/* pid names a running process (not a zombie); its start time unchecked. */
bool sim_pid_alive(int pid);
/* Number of items active on a physical device, counting live processes only. */
uint32_t sim_device_active(int phys);
uint64_t sim_device_mem_used(int phys);

/* Run `solo_ns` of work on physical device `phys`, sharing the device with
 * every other active item: returns after the work is done. A kernel's work
 * (`at_sm_clock`) progresses at the device's SM clock over its top clock;
 * copies and memsets are bound by memory and do not. */
void sim_device_run(int phys, uint64_t solo_ns, bool at_sm_clock);
uint64_t sim_copy_solo_ns(uint64_t bytes);

/* ---- page-locked host memory (simcuda_host_memory.c) ------------------------ */
/* [p, p + n) becomes page-locked (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
 * when it overlaps a range that is); unpin forgets the range starting at p
 * (false: none); pinned says whether [p, p + n) lies inside one. */
CUresult sim_host_pin(const void *p, size_t n);
bool sim_host_unpin(const void *p);
bool sim_host_pinned(const void *p, size_t n);

/* ---- heat and the SM clock (simcuda_heat.c) -------------------------------- */
/* Adds an item's share of a quantum to the device's busy time. */
void sim_heat_busy(int phys, uint64_t ns);
/* Takes a step of the heat model if the last one is HEAT_STEP_NS old. */
void sim_heat_step(int phys, uint64_t now);
/* The SM clock the device's kernels run at now, MHz. */
uint32_t sim_heat_clock(int phys);
/* KREX_SIM_HEAT=1 turns the model on for the device (never off). */
void sim_heat_enable_from_env(struct krex_sim_shm *shm);

/* ---- device memory (simcuda_api_memory.c) --------------------------------- */
/* True when [addr, addr + bytes) lies in mapped device memory of this process
 * (any device), allocated now or not: what a GPU's MMU would let through. */
/* Each device's range of addresses (simcuda_address_space.c); alloc_mu of
 * simcuda_api_memory.c guards changes, readers load atomically. */
struct sim_arena {
    uintptr_t base;    /* 0 until the first allocation on the device */
    uint64_t reserved; /* bytes of addresses */
    uint64_t mapped;   /* bytes from base readable and writable; only grows */
};
extern struct sim_arena sim_arenas[KREX_SIM_MAX_DEVICES];
bool sim_device_range_mapped(uint64_t addr, uint64_t bytes);

/* futex helpers on shared memory (not FUTEX_PRIVATE: other processes wait too) */
void sim_futex_wait(uint32_t *word, uint32_t expected, uint64_t timeout_ns);
void sim_futex_wake_all(uint32_t *word);

/* ---- execution log (simcuda_log.c) ---------------------------------------- */
void sim_log_record(const struct krex_sim_log_record *rec);
void sim_log_fill_common(struct krex_sim_log_record *rec, uint16_t kind);

/* ---- checkpoint gate (simcuda_lock.c) ------------------------------------- */
/* Every gated entry point brackets its work with these: while the process is
 * checkpoint-locked, sim_api_enter blocks. It returns the slot it counted
 * the call in (NULL before cuInit), which sim_api_leave must be given. */
struct krex_sim_proc_slot *sim_api_enter(void);
CUresult sim_api_leave(struct krex_sim_proc_slot *slot, CUresult result);
#define SIM_GATED(call)                                                                                      \
    do {                                                                                                     \
        struct krex_sim_proc_slot *gate_slot_ = sim_api_enter();                                             \
        return sim_api_leave(gate_slot_, (call));                                                            \
    } while (0)
/* Work accounting the locker waits on. */
void sim_inflight_add(void);
void sim_inflight_done(void);

/* ---- entry points (simcuda_api_*.c) ---------------------------------------- */
/* First thing of every entry point that needs cuInit (a forked child may not
 * use the parent's driver state). */
#define CHECK_INIT()                                                                                         \
    do {                                                                                                     \
        if (sim_forked())                                                                                    \
            return CUDA_ERROR_NOT_INITIALIZED;                                                               \
        if (!sim_initialized())                                                                              \
            return CUDA_ERROR_NOT_INITIALIZED;                                                               \
    } while (0)

static inline bool sim_valid_ordinal(CUdevice dev)
{
    return dev >= 0 && dev < sim_proc.visible_count;
}

/* ---- contexts, streams, events (simcuda_context.c, simcuda_stream.c) ------ */
#define SIM_MAGIC_CTX 0x4b435458u
#define SIM_MAGIC_STREAM 0x4b535452u
#define SIM_MAGIC_EVENT 0x4b45564eu
#define SIM_MAGIC_MODULE 0x4b4d4f44u
#define SIM_MAGIC_FUNC 0x4b46554eu
#define SIM_MAGIC_GRAPH 0x4b475248u
#define SIM_MAGIC_GRAPH_EXEC 0x4b474558u
#define SIM_MAGIC_DEAD 0xdeadbeefu

struct CUctx_st {
    uint32_t magic;
    int ordinal;                /* visible device ordinal */
    int phys;                   /* physical simulated device */
    bool primary;
    unsigned int flags;
    unsigned long long id;
    pthread_mutex_t mu;         /* guards the fields below */
    pthread_cond_t idle;        /* signalled when pending drops to 0 */
    uint64_t pending;           /* items queued or executing on its streams */
    struct CUstream_st *null_stream; /* default stream, created lazily */
    CUresult fault;             /* sticky: a kernel touched an address outside device memory */
};

struct sim_item;

struct CUstream_st {
    uint32_t magic;
    struct CUctx_st *ctx;
    unsigned long long id;
    unsigned int flags;
    int priority;
    pthread_mutex_t mu;         /* guards the fields below */
    pthread_cond_t changed;     /* work queued, item finished, destroyed */
    struct sim_item *head, *tail;
    uint64_t pending;           /* queued + executing */
    bool worker_started;
    bool destroyed;
    struct sim_capture *capture; /* non-NULL from cuStreamBeginCapture to cuStreamEndCapture */
};

struct CUevent_st {
    uint32_t magic;
    unsigned int flags;
    /* guarded by the process-wide event lock in simcuda_stream.c */
    unsigned int refs;          /* the handle + queued items naming it */
    uint64_t recorded_seq;      /* bumped by each cuEventRecord */
    uint64_t completed_seq;     /* last record the stream reached */
    uint64_t time_ns;           /* when the latest record was reached */
};

struct CUfunc_st {
    uint32_t magic;
    uint32_t loaded; /* 1 once its code is "uploaded": cuFuncLoad, or its first launch (lazy loading) */
    struct CUmod_st *module;
    struct CUfunc_st *next;
    char name[KREX_SIM_LOG_NAME_LEN];
    int max_dynamic_smem; /* cuFuncSetAttribute; 0: the default (48 KiB) */
    int carveout;         /* preferred shared-memory carveout, percent (-1: none) */
};

struct CUmod_st {
    uint32_t magic;
    pthread_mutex_t mu;
    struct CUfunc_st *functions;
};

struct sim_kernel_args {
    char name[KREX_SIM_LOG_NAME_LEN];
    uint64_t solo_ns;
    uint64_t *counter;          /* NULL = none */
    uint32_t grid[3];
    uint32_t block[3];
};

/* simcuda_context.c: the calling thread's context stack */
bool sim_ctx_valid(CUcontext ctx);
CUcontext sim_ctx_current(void); /* its top, NULL when empty or destroyed */
CUresult sim_ctx_push(CUcontext ctx);
CUresult sim_ctx_pop(CUcontext *pctx); /* the raw top; pctx may be NULL */
CUresult sim_ctx_set_current(CUcontext ctx); /* replaces the top; NULL pops */
void sim_ctx_forget(CUcontext ctx); /* removes every occurrence (destroyed) */
CUresult sim_ctx_init(struct CUctx_st *ctx, int ordinal, bool primary, unsigned int flags);
CUresult sim_ctx_synchronize(struct CUctx_st *ctx); /* waits until pending is 0; then its fault */
/* A kernel of the context faulted: every later call on it returns `fault`, as
 * the driver's sticky errors do (the context is unusable). */
void sim_ctx_fault(struct CUctx_st *ctx, CUresult fault);
CUresult sim_ctx_fault_of(struct CUctx_st *ctx);
void sim_ctx_pending_add(struct CUctx_st *ctx);
void sim_ctx_pending_done(struct CUctx_st *ctx);

/* One piece of stream work: what a stream queues, and what a graph holds
 * (kernels, copies, memsets, host functions) to queue at each launch. */
enum sim_work_kind {
    SIM_WORK_KERNEL,
    SIM_WORK_COPY,
    SIM_WORK_MEMSET,
    SIM_WORK_EVENT_RECORD,
    SIM_WORK_EVENT_WAIT,
    SIM_WORK_HOST_FUNC,
    SIM_WORK_CALLBACK,
};

struct sim_work {
    enum sim_work_kind kind;
    union {
        struct sim_kernel_args kernel;
        struct {
            void *dst;
            const void *src;
            uint64_t bytes;
            uint16_t log_kind;
            bool pageable;
        } copy;
        struct {
            void *dst;
            uint32_t value;
            unsigned int elem_size;
            uint64_t count;
        } memset;
        struct {
            struct CUevent_st *ev;
            uint64_t seq;
        } event;
        struct {
            CUhostFn fn;
            void *data;
        } host;
        struct {
            CUstreamCallback fn;
            void *data;
        } callback;
    } u;
};

/* simcuda_api_launch.c: a launch's two arguments (kernelParams or extra), and
 * whether a handle is a live function */
CUresult sim_read_kernel_args(void **params, void **extra, struct sim_kernel_args *k);
bool sim_valid_function(CUfunction f);

/* simcuda_stream.c */
/* Resolves NULL / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD to the default stream
 * of the current context; validates real handles. */
CUresult sim_stream_resolve(CUstream in, struct CUstream_st **out);
CUresult sim_stream_create(struct CUctx_st *ctx, unsigned int flags, int priority, CUstream *out);
CUresult sim_stream_destroy(CUstream stream);
CUresult sim_stream_synchronize(struct CUstream_st *s);
CUresult sim_stream_query(struct CUstream_st *s);

CUresult sim_enqueue_kernel(struct CUstream_st *s, const struct sim_kernel_args *args);
/* pageable: the host side is not page-locked (it costs KREX_SIM_PAGEABLE_COPY_FACTOR times as much). */
CUresult sim_enqueue_copy(struct CUstream_st *s, void *dst, const void *src, uint64_t bytes, uint16_t kind,
                          bool pageable);
CUresult sim_enqueue_memset(struct CUstream_st *s, void *dst, uint32_t value, unsigned int elem_size, uint64_t count);
CUresult sim_enqueue_host_func(struct CUstream_st *s, CUhostFn fn, void *user_data);
CUresult sim_enqueue_callback(struct CUstream_st *s, CUstreamCallback fn, void *user_data);
/* A graph's node, queued again at each launch (a copy of it). */
CUresult sim_enqueue_work(struct CUstream_st *s, const struct sim_work *w);

CUresult sim_event_create(unsigned int flags, CUevent *out);
CUresult sim_event_destroy(CUevent ev);
CUresult sim_event_record(CUevent ev, struct CUstream_st *s);
CUresult sim_event_query(CUevent ev);
CUresult sim_event_synchronize(CUevent ev);
CUresult sim_event_elapsed(float *ms, CUevent start, CUevent end);
CUresult sim_stream_wait_event(struct CUstream_st *s, CUevent ev);

/* simcuda_api_graph.c: a stream's capture, its fields guarded by the
 * stream's mu. Work queued on a capturing stream becomes a node of the
 * capture's graph instead of running (`w` is copied): CUDA_SUCCESS, or the
 * error the work's call returns (the capture is then invalidated). */
CUresult sim_capture_record(struct sim_capture *c, const struct sim_work *w);
/* A call the capture cannot hold (a synchronisation, say): the capture is
 * invalidated and the call returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED. */
CUresult sim_capture_refuse(struct sim_capture *c);
/* The stream is destroyed while capturing: its capture and graph go. */
void sim_capture_free(struct sim_capture *c);

#endif /* KREX_SIMCUDA_INTERNAL_H */
