/*
 * HIP initialises itself inside whichever of its calls a process makes
 * first: on ROCm that takes seconds (devices, HSA queues, code objects) and
 * happens in the kernel driver as much as in the process. Freezing a process
 * in the middle of it failed on the system the KREX paper measured, so the
 * library makes the first gated call of a process, if it is not itself one
 * of initialisation (hipInit, hipSetDevice, ...: class KREX_CLASS_CONTEXT),
 * call the gated hipInit first. A thread inside a context-class call is left
 * running by region entry and frozen once out of it (regions/entry/late_freeze.py):
 * never in the middle of its HIP initialisation.
 */
#include <pthread.h>

#include "hip_intercept.h"

static int initialised;

void krex_hip_init_before_call(void)
{
    if (__atomic_load_n(&initialised, __ATOMIC_ACQUIRE) || krex_depth > 0)
        return;
    /* Our own exported hipInit: the generated, gated, context-class wrapper. */
    if (hipInit(0) == hipSuccess)
        __atomic_store_n(&initialised, 1, __ATOMIC_RELEASE);
}

void krex_hip_init_after_fork(void)
{
    /* A child initialises HIP anew, if it may use it at all. */
    __atomic_store_n(&initialised, 0, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void hip_init_atfork(void)
{
    pthread_atfork(NULL, NULL, krex_hip_init_after_fork);
}
