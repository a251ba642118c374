/*
 * Shared by the forwarding client and the context server (fwd_common.h).
 */
#include "fwd_common.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int fwd_map(int fd, struct fwd_segment *seg, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot stat the segment: %s", strerror(errno));
        return -1;
    }
    if ((size_t)st.st_size < KREX_FWD_HEADER_SIZE) {
        snprintf(err, errlen, "the segment is %lld bytes, smaller than its header", (long long)st.st_size);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "cannot map the segment: %s", strerror(errno));
        return -1;
    }
    struct krex_fwd_header *h = p;
    /* The sizes are read once: the other side could change them later, and
     * every bound below is taken from these copies. */
    uint64_t ring = h->ring_size, staging = h->staging_size;
    const char *why = NULL;
    if (h->magic != KREX_FWD_MAGIC)
        why = "not a forwarding segment (bad magic)";
    else if (h->version != KREX_FWD_VERSION)
        why = "a forwarding segment of another version";
    else if (h->header_size != KREX_FWD_HEADER_SIZE)
        why = "a forwarding segment with another header size";
    else if (ring < 4096 || (ring & (ring - 1)) != 0 || ring > (1ull << 30))
        why = "its ring size is not a power of two between 4 KiB and 1 GiB";
    else if (staging < 4096 || staging > (1ull << 30))
        why = "its staging size is not between 4 KiB and 1 GiB";
    else if ((uint64_t)st.st_size < KREX_FWD_HEADER_SIZE + ring + staging)
        why = "the segment is smaller than its header, ring and staging area";
    if (why != NULL) {
        snprintf(err, errlen, "%s", why);
        munmap(p, (size_t)st.st_size);
        return -1;
    }
    seg->h = h;
    seg->ring = (uint8_t *)p + KREX_FWD_HEADER_SIZE;
    seg->staging = seg->ring + ring;
    seg->map_size = (size_t)st.st_size;
    seg->ring_size = ring;
    seg->staging_size = staging;
    return 0;
}

int fwd_attach(int fd, uint64_t ring, uint64_t staging, struct fwd_segment *seg, char *err, size_t errlen)
{
    if (ring < 4096 || (ring & (ring - 1)) != 0 || ring > (1ull << 30) || staging < 4096 || staging > (1ull << 30)) {
        snprintf(err, errlen, "sizes out of range (ring %llu, staging %llu bytes)", (unsigned long long)ring,
                 (unsigned long long)staging);
        return -1;
    }
    uint64_t size = KREX_FWD_HEADER_SIZE + ring + staging;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot stat the segment: %s", strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
        snprintf(err, errlen, "the segment is not the file the runtime made (%s of %lld bytes, not %llu)",
                 S_ISREG(st.st_mode) ? "a file" : "not a regular file", (long long)st.st_size,
                 (unsigned long long)size);
        return -1;
    }
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "cannot map the segment: %s", strerror(errno));
        return -1;
    }
    const struct krex_fwd_header *h = p;
    if (h->magic != KREX_FWD_MAGIC || h->version != KREX_FWD_VERSION || h->header_size != KREX_FWD_HEADER_SIZE ||
        h->ring_size != ring || h->staging_size != staging) {
        snprintf(err, errlen, "the segment's header is not the one the runtime wrote");
        munmap(p, (size_t)size);
        return -1;
    }
    seg->h = p;
    seg->ring = (uint8_t *)p + KREX_FWD_HEADER_SIZE;
    seg->staging = seg->ring + ring;
    seg->map_size = (size_t)size;
    seg->ring_size = ring;
    seg->staging_size = staging;
    return 0;
}

void fwd_unmap(struct fwd_segment *seg)
{
    if (seg->h != NULL)
        munmap(seg->h, seg->map_size);
    memset(seg, 0, sizeof *seg);
}

uint64_t fwd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fwd_futex_wait(uint32_t *word, uint32_t expected, uint64_t timeout_ns)
{
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)};
    syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

void fwd_futex_wake(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

#define SPIN_NS 20000u /* 20 us: a reply to a call that does not wait on the GPU comes sooner */

void fwd_spin_then_park(uint32_t *word, uint32_t expected, uint64_t park_ns)
{
    uint64_t until = fwd_now_ns() + SPIN_NS;
    for (unsigned i = 0;; i++) {
        if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != expected)
            return;
        if ((i & 63u) == 63u && fwd_now_ns() >= until)
            break;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    fwd_futex_wait(word, expected, park_ns);
}

#define FWD_NAME(name, fn) [KREX_FWD_OP_##name] = fn,
static const char *const op_names[KREX_FWD_OP_COUNT] = {KREX_FWD_OPS(FWD_NAME)};
#undef FWD_NAME

const char *fwd_op_name(unsigned op)
{
    return op > 0 && op < KREX_FWD_OP_COUNT ? op_names[op] : NULL;
}
