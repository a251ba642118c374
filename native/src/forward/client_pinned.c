/*
 * Page-locked host memory of a forwarded command.
 *
 * cuMemAllocHost and cuMemHostAlloc hand out page-aligned ranges of the
 * command's pinned arena (krex_forward.h: a file the runtime made, mapped
 * here and by the server), and the server registers its own mapping of each
 * range with the driver. A copy whose host side lies inside such a range
 * travels as an offset (HTOD_PINNED, DTOH_PINNED), and the server makes one
 * copy from or to the same pages, on the command's stream: the DMA the
 * program asked for, asynchronous where it asked for that.
 *
 * Two kinds of page-locked memory cannot be shared that way and stay
 * ordinary memory of the command, whose copies are staged through the
 * segment and counted (fwd_count_staged_pinned): memory the program
 * registers (cuMemHostRegister: the server cannot map another process's
 * anonymous pages), and allocations the arena has no room for (or when the
 * command has no arena).
 */
#include "client.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum pinned_kind {
    PINNED_FREE = 0,
    PINNED_ARENA,      /* a range of the arena, registered by the server */
    PINNED_ORDINARY,   /* an allocation outside the arena: ordinary memory, staged */
    PINNED_REGISTERED, /* the program's own memory, registered: staged */
};

#define PINNED_SLOTS 1024
static struct {
    uintptr_t base;
    size_t size;
    enum pinned_kind kind;
} pinned[PINNED_SLOTS];
static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static uint8_t *arena;   /* the command's pinned arena, NULL when it has none */
static size_t arena_size;
static int arena_fd = -1; /* kept to allocate its pages before they are touched */

static void arena_attach(void)
{
    const char *path = getenv(KREX_FWD_ENV_PINNED);
    if (path == NULL || *path == '\0')
        return;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        fwd_log("cannot open the pinned arena %s: page-locked allocations are ordinary memory (staged copies)", path);
        return;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && st.st_size % KREX_FWD_PINNED_ALIGN == 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            arena = p, arena_size = (size_t)st.st_size, arena_fd = fd;
            return;
        }
    }
    close(fd);
}

/* A free slot, marked taken with (base, size, kind); -1 when the table is full. */
static long take_slot(uintptr_t base, size_t size, enum pinned_kind kind)
{
    for (size_t i = 0; i < PINNED_SLOTS; i++)
        if (pinned[i].kind == PINNED_FREE) {
            pinned[i].base = base, pinned[i].size = size, pinned[i].kind = kind;
            return (long)i;
        }
    return -1;
}

/* The lowest offset of the arena where `n` bytes fit between the ranges
 * handed out (first fit), or -1. Called with pinned_lock held. */
static int64_t arena_gap(size_t n)
{
    uintptr_t start = (uintptr_t)arena, end = start + arena_size, at = start;
    for (bool moved = true; moved;) {
        moved = false;
        for (size_t i = 0; i < PINNED_SLOTS; i++)
            if (pinned[i].kind == PINNED_ARENA && pinned[i].base < at + n && at < pinned[i].base + pinned[i].size) {
                at = pinned[i].base + pinned[i].size;
                moved = true;
            }
        if (at > end || end - at < n)
            return -1;
    }
    return (int64_t)(at - start);
}

/* A range of the arena, registered by the server; NULL when there is no room
 * (or the server could not register it). */
static void *arena_alloc(size_t bytesize)
{
    pthread_once(&arena_once, arena_attach);
    if (arena == NULL || bytesize > arena_size)
        return NULL;
    size_t n = (bytesize + KREX_FWD_PINNED_ALIGN - 1) / KREX_FWD_PINNED_ALIGN * KREX_FWD_PINNED_ALIGN;
    pthread_mutex_lock(&pinned_lock);
    int64_t off = arena_gap(n);
    long slot = off < 0 ? -1 : take_slot((uintptr_t)arena + (uint64_t)off, n, PINNED_ARENA);
    pthread_mutex_unlock(&pinned_lock);
    if (slot < 0)
        return NULL;
    /* Its pages are allocated first (a full /dev/shm is an error here, not a
     * bus error at the first touch), so they are this command's memory, not
     * its server's; registered; then zeroed, as the range may have been
     * handed out before (only once registered: a process that is not the
     * server's client, a child, never writes into the arena). */
    struct fwd_reply r = {0};
    if (posix_fallocate(arena_fd, (off_t)off, (off_t)n) != 0 ||
        fwd_call(KREX_FWD_OP_PINNED_REGISTER, 0, ARGS((uint64_t)off, (uint64_t)n), NULL, 0, NULL, 0, &r) !=
            CUDA_SUCCESS) {
        pthread_mutex_lock(&pinned_lock);
        pinned[slot].kind = PINNED_FREE;
        pthread_mutex_unlock(&pinned_lock);
        return NULL;
    }
    memset(arena + off, 0, n);
    return arena + off;
}

static CUresult host_alloc(void **pp, size_t bytesize)
{
    if (pp == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fwd_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    void *p = arena_alloc(bytesize);
    if (p != NULL) {
        *pp = p;
        return CUDA_SUCCESS;
    }
    if (posix_memalign(pp, 4096, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&pinned_lock);
    long slot = take_slot((uintptr_t)*pp, bytesize, PINNED_ORDINARY);
    pthread_mutex_unlock(&pinned_lock);
    if (slot < 0) {
        free(*pp);
        *pp = NULL;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

FWD_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize);
}

FWD_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (Flags & CU_MEMHOSTALLOC_DEVICEMAP)
        return fwd_unknown("cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP)");
    return host_alloc(pp, bytesize);
}

/* The slot of the allocation or registration that starts at p, of one of the
 * two kinds; -1 when none. Called with pinned_lock held. */
static long slot_at(const void *p, enum pinned_kind a, enum pinned_kind b)
{
    for (size_t i = 0; i < PINNED_SLOTS; i++)
        if ((pinned[i].kind == a || pinned[i].kind == b) && pinned[i].base == (uintptr_t)p)
            return (long)i;
    return -1;
}

FWD_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
    if (p == NULL)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&pinned_lock);
    long i = slot_at(p, PINNED_ARENA, PINNED_ORDINARY);
    enum pinned_kind kind = i >= 0 ? pinned[i].kind : PINNED_FREE;
    pthread_mutex_unlock(&pinned_lock);
    if (kind == PINNED_FREE)
        return CUDA_ERROR_INVALID_VALUE;
    if (kind == PINNED_ARENA) {
        /* The server unregisters it once the work that may use it has run. */
        struct fwd_reply r = {0};
        uint64_t off = (uint64_t)((uint8_t *)p - arena);
        CUresult rc = fwd_call(KREX_FWD_OP_PINNED_UNREGISTER, 0, ARGS(off), NULL, 0, NULL, 0, &r);
        if (rc != CUDA_SUCCESS)
            return rc;
    } else {
        free(p);
    }
    pthread_mutex_lock(&pinned_lock);
    pinned[i].kind = PINNED_FREE;
    pthread_mutex_unlock(&pinned_lock);
    return CUDA_SUCCESS;
}

/* Registering pins nothing here (the server cannot reach the program's
 * pages): its copies are staged. Mapped registrations need a device address
 * of host memory, which forwarded mode cannot give. */
FWD_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    if (Flags & (CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY))
        return fwd_unknown("cuMemHostRegister(CU_MEMHOSTREGISTER_DEVICEMAP)");
    if (p == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fwd_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t off;
    if (fwd_page_locked(p, 1) || fwd_pinned_offset(p, 1, &off))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    pthread_mutex_lock(&pinned_lock);
    long slot = take_slot((uintptr_t)p, bytesize, PINNED_REGISTERED);
    pthread_mutex_unlock(&pinned_lock);
    return slot < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

FWD_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    if (!fwd_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&pinned_lock);
    long i = slot_at(p, PINNED_REGISTERED, PINNED_REGISTERED);
    if (i >= 0)
        pinned[i].kind = PINNED_FREE;
    pthread_mutex_unlock(&pinned_lock);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* [p, p+n) inside one range of the arena's (in_arena), or of either staged kind;
 * *base: the arena's mapping. */
static bool inside(const void *p, size_t n, bool in_arena, uintptr_t *base)
{
    uintptr_t a = (uintptr_t)p;
    bool found = false;
    pthread_mutex_lock(&pinned_lock);
    for (size_t i = 0; i < PINNED_SLOTS && !found; i++) {
        enum pinned_kind k = pinned[i].kind;
        if (k == PINNED_FREE || (k == PINNED_ARENA) != in_arena)
            continue;
        found = a >= pinned[i].base && a - pinned[i].base <= pinned[i].size && n <= pinned[i].size - (a - pinned[i].base);
    }
    pthread_mutex_unlock(&pinned_lock);
    if (found && base != NULL)
        *base = (uintptr_t)arena;
    return found;
}

bool fwd_page_locked(const void *p, size_t n)
{
    return inside(p, n, false, NULL);
}

bool fwd_pinned_offset(const void *p, size_t n, uint64_t *off)
{
    uintptr_t base;
    if (p == NULL || !inside(p, n, true, &base))
        return false;
    *off = (uint64_t)((uintptr_t)p - base);
    return true;
}
