/*
 * krex_simcuda.h - contract of the KREX *simulated* CUDA driver.
 *
 * The simulator is a libcuda.so.1 for machines without a GPU. It executes
 * "kernels" by sleeping for their simulated duration on a simulated device
 * shared by every process of the machine. Nothing here is a GPU figure.
 *
 * This header is a contract: krex_runtime/sim/simcuda.py mirrors the shared
 * memory layout and the execution-log record with the struct module, and a
 * test compares the two. Change a layout only together with its version.
 *
 * Plain C types only (no cuda.h) so that tools can include it anywhere.
 */
#ifndef KREX_SIMCUDA_H
#define KREX_SIMCUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Kernel parameter convention
 *
 * Every function of every simulated module is a valid kernel. Its launch
 * arguments (cuLaunchKernel / cuLaunchKernelEx kernelParams) mean:
 *
 *   kernelParams[0]  -> uint64_t   solo duration in nanoseconds: how long the
 *                                  kernel runs alone on the device (its work).
 *                                  Missing (kernelParams == NULL) means 0.
 *   kernelParams[1]  -> CUdeviceptr (optional; 0 = none) of a uint64_t that
 *                                  the kernel atomically increments by one
 *                                  when it completes.
 *
 * Both values are read at launch time, as the real driver copies arguments.
 * Grid and block dimensions are recorded in the log; they do not change the
 * duration.
 * ------------------------------------------------------------------------- */
#define KREX_SIM_PARAM_DURATION_NS 0
#define KREX_SIM_PARAM_COUNTER_PTR 1
/* cuFuncGetParamInfo answers this layout for every function: the duration
 * (8 bytes at offset 0) and the counter pointer (8 bytes at offset 8). */
#define KREX_SIM_PARAM_COUNT 2

/* Not a CUDA entry point: a context server of forwarded mode, which runs the
 * work of one command at a time, sets the tenant id its execution-log records
 * and its process slot carry (0 between commands). Found with dlsym. */
void krex_sim_set_tenant(int32_t tenant_id);

/* ---------------------------------------------------------------------------
 * Environment
 * ------------------------------------------------------------------------- */
#define KREX_SIM_ENV_DEVICE "KREX_SIM_DEVICE"     /* shared device name, default "default" */
#define KREX_SIM_ENV_GPUS "KREX_SIM_GPUS"         /* devices, read by the creator, default 1 */
#define KREX_SIM_ENV_LOG "KREX_SIM_LOG"           /* execution log file, unset = no log */
#define KREX_SIM_ENV_TENANT "KREX_TENANT_ID"      /* integer written into log records */
#define KREX_SIM_ENV_MEM_MB "KREX_SIM_MEM_MB"     /* memory per device, read by the creator */
#define KREX_SIM_ENV_COPY_MBPS "KREX_SIM_COPY_MBPS" /* copy/memset bandwidth, MB/s (1e6 B/s) */
/* Host-side latency, in ms, of context creation (cuCtxCreate*, the first
 * cuDevicePrimaryCtxRetain of a device) and of module loading (cuModuleLoad*):
 * the calling thread stays inside the call that long. Read
 * at each call, so a program may set them for itself; unset means none. */
#define KREX_SIM_ENV_CTX_CREATE_MS "KREX_SIM_CTX_CREATE_MS"
#define KREX_SIM_ENV_MODULE_LOAD_MS "KREX_SIM_MODULE_LOAD_MS"
/* Lazy loading (CUDA's default since 12.2): a function's code is loaded at its
 * first launch, which stays inside cuLaunchKernel this long (ms) before it
 * enqueues; cuFuncLoad does the same load on its own, and cuFuncIsLoaded says
 * which has happened. Unset means none. */
#define KREX_SIM_ENV_LAZY_LOAD_MS "KREX_SIM_LAZY_LOAD_MS"
/* Read by the process that takes checkpoint locks (the runtime): a CUresult
 * that cuCheckpointProcessLock returns instead of locking, as the real driver
 * now and then refuses a lock with CUDA_ERROR_OPERATING_SYSTEM (304). Unset
 * means none. */
#define KREX_SIM_ENV_LOCK_FAILS "KREX_SIM_LOCK_FAILS"
/* "1": the device's SM clock falls as it heats under sustained load, and its
 * kernels run at that clock (below: heat). Read by every process that
 * attaches: one that has it set turns the model on for the device, for good;
 * none turns it off. Unset, the clock stays at the top clock. */
#define KREX_SIM_ENV_HEAT "KREX_SIM_HEAT"

#define KREX_SIM_DEFAULT_DEVICE_NAME "default"
#define KREX_SIM_DEFAULT_MEM_MB 81920u    /* 80 GiB */
#define KREX_SIM_DEFAULT_COPY_MBPS 1000u  /* 1 GB/s: 1 byte costs 1 ns of solo time */
/* A copy between the device and pageable host memory (not allocated with
 * cuMemAllocHost/cuMemHostAlloc, not registered with cuMemHostRegister) costs
 * this many times a copy of page-locked memory, as the driver stages it; its
 * log record is named "memcpy pageable", the others "memcpy". */
#define KREX_SIM_PAGEABLE_COPY_FACTOR 2u

/* The shared device lives in POSIX shared memory: shm_open(KREX_SIM_SHM_PREFIX
 * name), i.e. the file /dev/shm/krex-sim-<name> on Linux. */
#define KREX_SIM_SHM_PREFIX "/krex-sim-"
#define KREX_SIM_SHM_DIR "/dev/shm"

/* ---------------------------------------------------------------------------
 * Heat and the SM clock
 *
 * Every device keeps its temperature, whether or not the model is on: a
 * first-order thermal model driven by its busy share u (the share of wall
 * time during which at least one item executed) since the last step,
 *
 *   target = AMBIENT + RISE * u
 *   temp  <- target + (temp - target) * exp(-dt / TAU)
 *
 * stepped by whichever process runs work on it, at most every HEAT_STEP_NS
 * (a reader projects the last step to now with the same formula:
 * krex_runtime/sim/heat.py). With the model on (KREX_SIM_HEAT), the SM clock
 * is the top clock less one boost bin of BOOST_BIN_MHZ for every BOOST_BIN_C
 * above BOOST_KNEE_C, down to the base clock, as a GPU's boost gives up clock
 * bins as it warms; a kernel (not a copy or memset: those are bound by
 * memory, not the SM clock) progresses at clock / top of its processor share.
 * Half loaded, the device settles near 57 C and 1905 MHz (4% below the top
 * clock); fully loaded, at AMBIENT + RISE = 85 C and the base clock, 9% below
 * it: inside the runtime's 10% clock tolerance, so nothing is flagged and no
 * region entry waits for it. Without the model the clock stays at the top.
 * ------------------------------------------------------------------------- */
#define KREX_SIM_TOP_SM_CLOCK_MHZ 1980u
#define KREX_SIM_BASE_SM_CLOCK_MHZ 1800u
#define KREX_SIM_AMBIENT_C 30
#define KREX_SIM_LOAD_RISE_C 55       /* above ambient, fully loaded, once settled */
#define KREX_SIM_HEAT_TAU_MS 5000u    /* the thermal time constant */
#define KREX_SIM_HEAT_STEP_NS 10000000ull
#define KREX_SIM_BOOST_KNEE_C 40
#define KREX_SIM_BOOST_BIN_C 3
#define KREX_SIM_BOOST_BIN_MHZ 15u

/* ---------------------------------------------------------------------------
 * Shared memory layout (version 4). Little-endian, natural alignment, no
 * implicit padding: every struct spells its padding out.
 * ------------------------------------------------------------------------- */
#define KREX_SIM_SHM_MAGIC 0x314d49535845524bull /* "KREXSIM1" read as little-endian u64 */
#define KREX_SIM_SHM_VERSION 4u
#define KREX_SIM_MAX_DEVICES 16
#define KREX_SIM_MAX_PROCS 512

/* One slot per process that called cuInit. Processes claim a free slot (pid 0)
 * with a compare-and-swap; a slot whose pid is dead (or is a zombie, or whose
 * start time differs: pid reuse) is reaped by whoever notices. Counters of a
 * dead process therefore stop counting as soon as it is noticed. */
#define KREX_SIM_SLOT_FREE 0
#define KREX_SIM_SLOT_BUSY (-1) /* being claimed or reaped: owned by one process */

struct krex_sim_proc_slot {
    int32_t pid;                 /* owner, KREX_SIM_SLOT_FREE or KREX_SIM_SLOT_BUSY */
    uint32_t lock_word;          /* futex: 0 running, 1 checkpoint-locked */
    uint64_t start_time;         /* owner's start time (/proc/<pid>/stat field 22) */
    int32_t locker_pid;          /* who locked it (diagnostics), 0 when unlocked */
    uint32_t in_call;            /* owner threads inside a gated driver call */
    uint32_t inflight;           /* owner's stream items queued or executing */
    uint32_t drain_seq;          /* futex: bumped when in_call or inflight drops to 0 */
    int32_t tenant_id;           /* KREX_TENANT_ID of the owner */
    uint32_t reserved0;
    uint32_t active[KREX_SIM_MAX_DEVICES];   /* owner's items executing now, per device */
    uint64_t mem_used[KREX_SIM_MAX_DEVICES]; /* owner's allocated bytes, per device */
    /* What NVML's running-process list and per-process samples tell of a
     * real GPU: which devices the owner ran work on, and how much. */
    uint32_t devices_used;       /* bit d: the owner executed work on device d */
    uint32_t reserved2;
    uint64_t last_work_ns;       /* CLOCK_MONOTONIC when the owner's latest item started */
    /* Items (kernels, copies, memsets) the owner started, per device: a
     * certificate on one GPU must not count work its tenant ran on another. */
    uint64_t work_items[KREX_SIM_MAX_DEVICES];
    uint64_t reserved3;          /* pads the slot to whole cache lines */
};

/* What a reaped slot's owner did: a process that dies with work in flight has
 * its slot reaped within milliseconds (and its counters cleared), so a region's
 * certificate would no longer see that it ran. The reaper copies the slot here
 * first, into a ring of KREX_SIM_REAPED_MAX records (version 4). */
#define KREX_SIM_REAPED_MAX 64

struct krex_sim_reaped {
    uint64_t seq;                /* n + 1 for the n-th reaped slot, written last; 0: being written */
    int32_t pid;
    int32_t tenant_id;
    uint64_t start_time;
    uint64_t last_work_ns;       /* as the slot said: CLOCK_MONOTONIC of its latest item's start */
    uint32_t devices_used;
    uint32_t reserved0;
    uint64_t work_items[KREX_SIM_MAX_DEVICES];
};

struct krex_sim_device_info {
    uint8_t uuid[16];
    char name[64];
    uint64_t total_mem;
    uint64_t reserved[5];
};

/* What a device's own sensors would tell: how long it has been busy, how hot
 * it is and the SM clock its kernels run at. Written by the processes that run
 * work on it, read by anyone (the runtime's telemetry reads the file).
 *
 * busy_ns grows by the wall time during which at least one item executed:
 * each executing item adds its processor share (dt / n) of every quantum, so
 * its rate is what NVML calls utilisation. The heat fields are one step of
 * the model above, taken under step_lock (the stepping process's pid, 0:
 * free; a dead stepper's lock is taken over) and published like a seqlock:
 * the stepper bumps seq_end, writes the fields, then sets seq_start to it; a
 * reader that copies the struct from its start to its end holds a whole step
 * when the two are equal. */
struct krex_sim_device_load {
    uint32_t seq_start;
    int32_t step_lock;
    uint64_t busy_ns;            /* atomically added to, outside the seqlock */
    uint64_t heat_ns;            /* CLOCK_MONOTONIC of the last step; 0: none yet (ambient, top clock) */
    uint64_t heat_busy_ns;       /* busy_ns at that step */
    int32_t temp_mc;             /* temperature at that step, milli-degrees C */
    uint32_t sm_clock_mhz;       /* the SM clock since that step */
    uint64_t reserved[2];
    uint32_t reserved1;
    uint32_t seq_end;
};

struct krex_sim_shm {
    uint64_t magic;              /* KREX_SIM_SHM_MAGIC once initialised */
    uint32_t version;            /* KREX_SIM_SHM_VERSION */
    uint32_t ready;              /* 1 once fully initialised (written last) */
    uint32_t num_devices;        /* fixed by the creating process */
    uint32_t max_procs;          /* KREX_SIM_MAX_PROCS */
    uint32_t copy_mbps;          /* fixed by the creating process */
    uint32_t heat;               /* 1: the heat model is on (KREX_SIM_HEAT) */
    uint64_t reserved1[5];
    struct krex_sim_device_info devices[KREX_SIM_MAX_DEVICES];
    struct krex_sim_proc_slot procs[KREX_SIM_MAX_PROCS];
    struct krex_sim_device_load load[KREX_SIM_MAX_DEVICES];
    uint64_t reaped_seq;         /* slots reaped so far with work done: the ring's next record */
    uint64_t reserved2[7];
    struct krex_sim_reaped reaped[KREX_SIM_REAPED_MAX]; /* record n at n % KREX_SIM_REAPED_MAX */
};

/* The number of kernels/copies active on device d is the sum of
 * procs[i].active[d] over slots whose pid is alive. */

/* ---------------------------------------------------------------------------
 * Execution log (version 1)
 *
 * With KREX_SIM_LOG set, each process appends one record per executed
 * kernel / copy / memset and per checkpoint lock / unlock, with a single
 * write() on an O_APPEND descriptor, so records of concurrent processes never
 * interleave. Times are CLOCK_MONOTONIC nanoseconds (comparable across the
 * processes of one boot).
 * ------------------------------------------------------------------------- */
#define KREX_SIM_LOG_MAGIC 0x474c534bu /* "KSLG" little-endian */
#define KREX_SIM_LOG_VERSION 1u
#define KREX_SIM_LOG_NAME_LEN 40

enum krex_sim_log_kind {
    KREX_SIM_LOG_KERNEL = 1,
    KREX_SIM_LOG_MEMCPY_HTOD = 2,
    KREX_SIM_LOG_MEMCPY_DTOH = 3,
    KREX_SIM_LOG_MEMCPY_DTOD = 4,
    KREX_SIM_LOG_MEMSET = 5,
    /* Checkpoint lock: pid is the locker, target_pid the locked process,
     * start_ns when the lock was requested, end_ns when it returned (the
     * target's submitted work had finished). */
    KREX_SIM_LOG_LOCK = 6,
    /* start_ns == end_ns == the moment the target was unlocked. */
    KREX_SIM_LOG_UNLOCK = 7,
    /* A lock that gave up after timeoutMs; the target is not locked. */
    KREX_SIM_LOG_LOCK_TIMEOUT = 8,
    KREX_SIM_LOG_HOST_FUNC = 9,
};

struct krex_sim_log_record {
    uint32_t magic;          /* KREX_SIM_LOG_MAGIC */
    uint16_t version;        /* KREX_SIM_LOG_VERSION */
    uint16_t kind;           /* enum krex_sim_log_kind */
    int32_t pid;             /* process that executed (or locked) */
    int32_t tenant_id;       /* KREX_TENANT_ID of that process, 0 if unset */
    int32_t device;          /* physical simulated device index, -1 for locks */
    int32_t target_pid;      /* lock records: the locked process; else 0 */
    uint64_t stream_id;      /* process-unique stream id (cuStreamGetId) */
    uint64_t start_ns;       /* CLOCK_MONOTONIC */
    uint64_t end_ns;         /* CLOCK_MONOTONIC */
    uint64_t solo_ns;        /* duration it would have alone on the device */
    uint64_t bytes;          /* copies and memsets; 0 for kernels */
    uint32_t grid[3];
    uint32_t block[3];
    char name[KREX_SIM_LOG_NAME_LEN]; /* kernel name, NUL-padded, may be truncated */
} __attribute__((packed));

#ifndef __cplusplus
_Static_assert(sizeof(struct krex_sim_log_record) == 128, "log record is 128 bytes");
_Static_assert(sizeof(struct krex_sim_proc_slot) == 384, "process slot is 384 bytes (six cache lines)");
_Static_assert(sizeof(struct krex_sim_device_info) == 128, "device info is 128 bytes");
_Static_assert(sizeof(struct krex_sim_device_load) == 64, "device load is 64 bytes (one cache line)");
_Static_assert(sizeof(struct krex_sim_reaped) == 168, "a reaped record is 168 bytes");
#endif

#ifdef __cplusplus
}
#endif

#endif /* KREX_SIMCUDA_H */
