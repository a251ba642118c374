/*
 * Futex and clock helpers. The gate lives in a MAP_SHARED file mapping used
 * by several processes, so the futex operations are the shared (non-PRIVATE)
 * ones.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "intercept_internal.h"

uint64_t krex_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void krex_futex_wait(const uint32_t *word, uint32_t expected, uint64_t timeout_ns)
{
    struct timespec ts = {
        .tv_sec = (time_t)(timeout_ns / 1000000000ull),
        .tv_nsec = (long)(timeout_ns % 1000000000ull),
    };
    /* EAGAIN (value changed), EINTR and ETIMEDOUT all mean: look again. */
    syscall(SYS_futex, word, FUTEX_WAIT, expected, timeout_ns ? &ts : NULL, NULL, 0);
}

void krex_futex_wake_all(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
