/*
 * What the forwarding client (libcuda.so.1 of a forwarded command) and the
 * context server (krex-ctxd) share: mapping a segment, futex waits, the
 * names of the operations. Not installed; include/krex_forward.h is the
 * contract.
 */
#ifndef KREX_FWD_COMMON_H
#define KREX_FWD_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "krex_forward.h"

struct fwd_segment {
    struct krex_fwd_header *h;
    uint8_t *ring;
    uint8_t *staging;
    size_t map_size;
    /* Copies of the header's sizes, taken once: the other side may rewrite
     * the header at any time, and every bound is taken from these. */
    uint64_t ring_size;
    uint64_t staging_size;
};

/* Maps the segment of `fd` and checks its header; on failure writes why into
 * err and returns -1. (The client's: it believes the header.) */
int fwd_map(int fd, struct fwd_segment *seg, char *err, size_t errlen);
/* The server's: maps exactly a header, a ring of `ring` bytes and a staging
 * area of `staging` bytes (the sizes the runtime made it with, never read
 * from the segment), after checking that `fd` is a regular file of exactly
 * that size whose header says the same. */
int fwd_attach(int fd, uint64_t ring, uint64_t staging, struct fwd_segment *seg, char *err, size_t errlen);
void fwd_unmap(struct fwd_segment *seg);

uint64_t fwd_now_ns(void); /* CLOCK_MONOTONIC */
/* Sleeps while *word == expected, at most timeout_ns. */
void fwd_futex_wait(uint32_t *word, uint32_t expected, uint64_t timeout_ns);
void fwd_futex_wake(uint32_t *word);
/* Spins a little while *word == expected (the peer usually answers within
 * microseconds), then parks for at most park_ns; returns once it changed or
 * the park ended. */
void fwd_spin_then_park(uint32_t *word, uint32_t expected, uint64_t park_ns);

/* "cuLaunchKernel" for KREX_FWD_OP_LAUNCH; NULL for an unknown op. */
const char *fwd_op_name(unsigned op);

static inline uint32_t fwd_round8(uint32_t n)
{
    return (n + 7u) & ~7u;
}

#endif /* KREX_FWD_COMMON_H */
