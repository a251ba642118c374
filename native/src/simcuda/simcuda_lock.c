/*
 * The process checkpoint lock (cuCheckpointProcessLock / Unlock / GetState),
 * as the runtime's "driver-lock" gate backend uses it on a real driver:
 * locking blocks every further driver call of the target and returns only
 * when the target's submitted work has finished.
 *
 * Target side: each gated entry point counts itself in slot->in_call and
 * checks slot->lock_word (a futex). The pair is a Dekker handshake with the
 * locker, which sets lock_word first and then waits for in_call == 0 and
 * inflight == 0: either the target sees the lock, or the locker sees the
 * call, never neither. The target's stream workers are not gated, so the
 * queued work drains while the process is locked.
 */
#include "simcuda_internal.h"

#include <stdlib.h>
#include <stdio.h>
#include <unistd.h>

/* Locked threads and lockers re-check at least this often, so a missed wake
 * (or a locker or target that died) never leaves anyone asleep for good. */
#define SIM_LOCK_RECHECK_NS 50000000ull
#define SIM_DRAIN_RECHECK_NS 5000000ull

static void signal_drain(struct krex_sim_proc_slot *slot)
{
    __atomic_add_fetch(&slot->drain_seq, 1, __ATOMIC_ACQ_REL);
    sim_futex_wake_all(&slot->drain_seq);
}

struct krex_sim_proc_slot *sim_api_enter(void)
{
    struct krex_sim_proc_slot *slot = __atomic_load_n(&sim_proc.slot, __ATOMIC_ACQUIRE);
    if (!slot || sim_forked())
        return NULL;
    __atomic_add_fetch(&slot->in_call, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&slot->lock_word, __ATOMIC_SEQ_CST)) {
        /* Wait outside the call, so that the locker sees us idle. */
        if (__atomic_sub_fetch(&slot->in_call, 1, __ATOMIC_SEQ_CST) == 0)
            signal_drain(slot);
        sim_futex_wait(&slot->lock_word, 1, SIM_LOCK_RECHECK_NS);
        __atomic_add_fetch(&slot->in_call, 1, __ATOMIC_SEQ_CST);
    }
    return slot;
}

CUresult sim_api_leave(struct krex_sim_proc_slot *slot, CUresult result)
{
    if (!slot)
        return result;
    if (__atomic_sub_fetch(&slot->in_call, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&slot->lock_word, __ATOMIC_SEQ_CST))
        signal_drain(slot);
    return result;
}

void sim_inflight_add(void)
{
    __atomic_add_fetch(&sim_proc.slot->inflight, 1, __ATOMIC_SEQ_CST);
}

void sim_inflight_done(void)
{
    struct krex_sim_proc_slot *slot = sim_proc.slot;
    if (__atomic_sub_fetch(&slot->inflight, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&slot->lock_word, __ATOMIC_SEQ_CST))
        signal_drain(slot);
}

static void log_lock_event(uint16_t kind, int target, uint64_t start, uint64_t end)
{
    struct krex_sim_log_record rec;
    sim_log_fill_common(&rec, kind);
    rec.target_pid = target;
    rec.start_ns = start;
    rec.end_ns = end;
    sim_log_record(&rec);
}

/* A pid with no live slot never initialised the simulator (or has exited):
 * like the real driver refusing a process without CUDA, answer
 * CUDA_ERROR_NOT_INITIALIZED. */
static CUresult target_slot(int pid, struct krex_sim_proc_slot **out)
{
    if (pid <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_attach();
    if (rc != CUDA_SUCCESS)
        return rc;
    *out = sim_find_slot(pid);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult CUDAAPI cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    uint64_t start = sim_now_ns();
    if (pid == (int)getpid())
        return CUDA_ERROR_INVALID_VALUE; /* would deadlock on our own next call */
    const char *fails = getenv(KREX_SIM_ENV_LOCK_FAILS);
    if (fails && *fails)
        return (CUresult)atoi(fails);
    struct krex_sim_proc_slot *slot;
    CUresult rc = target_slot(pid, &slot);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint32_t unlocked = 0;
    if (!__atomic_compare_exchange_n(&slot->lock_word, &unlocked, 1, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return CUDA_ERROR_ILLEGAL_STATE; /* already locked */
    __atomic_store_n(&slot->locker_pid, (int32_t)getpid(), __ATOMIC_RELEASE);

    uint64_t timeout_ns = args ? (uint64_t)args->timeoutMs * 1000000ull : 0;
    for (;;) {
        uint32_t seq = __atomic_load_n(&slot->drain_seq, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&slot->pid, __ATOMIC_ACQUIRE) != pid || !sim_slot_alive(slot, pid))
            return CUDA_ERROR_NOT_INITIALIZED; /* the target exited while draining */
        if (__atomic_load_n(&slot->in_call, __ATOMIC_SEQ_CST) == 0 &&
            __atomic_load_n(&slot->inflight, __ATOMIC_SEQ_CST) == 0)
            break;
        uint64_t now = sim_now_ns();
        uint64_t wait = SIM_DRAIN_RECHECK_NS;
        if (timeout_ns) {
            if (now - start >= timeout_ns) {
                /* Give up and leave the target running, as if never locked. */
                __atomic_store_n(&slot->locker_pid, 0, __ATOMIC_RELEASE);
                __atomic_store_n(&slot->lock_word, 0, __ATOMIC_SEQ_CST);
                sim_futex_wake_all(&slot->lock_word);
                log_lock_event(KREX_SIM_LOG_LOCK_TIMEOUT, pid, start, sim_now_ns());
                return CUDA_ERROR_TIMEOUT;
            }
            if (timeout_ns - (now - start) < wait)
                wait = timeout_ns - (now - start);
        }
        sim_futex_wait(&slot->drain_seq, seq, wait);
    }
    log_lock_event(KREX_SIM_LOG_LOCK, pid, start, sim_now_ns());
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    (void)args;
    struct krex_sim_proc_slot *slot;
    CUresult rc = target_slot(pid, &slot);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* Log before waking, so that the target's next record starts after it. */
    uint64_t now = sim_now_ns();
    if (!__atomic_load_n(&slot->lock_word, __ATOMIC_SEQ_CST))
        return CUDA_ERROR_ILLEGAL_STATE; /* not locked */
    log_lock_event(KREX_SIM_LOG_UNLOCK, pid, now, now);
    __atomic_store_n(&slot->locker_pid, 0, __ATOMIC_RELEASE);
    uint32_t locked = 1;
    if (!__atomic_compare_exchange_n(&slot->lock_word, &locked, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        return CUDA_ERROR_ILLEGAL_STATE;
    sim_futex_wake_all(&slot->lock_word);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    struct krex_sim_proc_slot *slot;
    CUresult rc = target_slot(pid, &slot);
    if (rc != CUDA_SUCCESS)
        return rc;
    *state = __atomic_load_n(&slot->lock_word, __ATOMIC_SEQ_CST) ? CU_PROCESS_STATE_LOCKED
                                                                 : CU_PROCESS_STATE_RUNNING;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
    (void)pid;
    (void)tid;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    (void)pid;
    (void)args;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    (void)pid;
    (void)args;
    return CUDA_ERROR_NOT_SUPPORTED;
}
