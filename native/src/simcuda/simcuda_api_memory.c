/*
 * Driver entry points: allocations, copies and memsets.
 */
#include "simcuda_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- memory: device memory is host memory, one arena per device ----------------
 *
 * As on a GPU, each device's memory of this process is one range of
 * addresses (reserved at the first allocation there), and allocations are
 * carved out of it first-fit. What a freed allocation held stays in place
 * until something overwrites it: a driver clears memory between processes,
 * not between the allocations of one process, so a later allocation of the
 * same process may start with an earlier one's bytes. Pages once used stay
 * mapped, as a driver's pool keeps them: a copy, a memset or a kernel reaches
 * any address of mapped device memory, allocated now or not, like the GPU's
 * MMU; outside it a copy or memset fails with CUDA_ERROR_INVALID_VALUE and
 * a kernel faults its context (sticky CUDA_ERROR_ILLEGAL_ADDRESS), never the
 * process.
 */

struct sim_alloc {
    CUdeviceptr ptr;
    size_t size; /* asked for */
    size_t span; /* taken from the arena: size rounded up to SIM_ALLOC_ALIGN */
    int phys;
};

static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sim_alloc *allocs; /* sorted by ptr */
static size_t alloc_count, alloc_cap;

#define SIM_ALLOC_ALIGN 256
#define SIM_PAGE (2ull << 20)         /* mapped in 2 MiB pages, as GPUs map device memory */
#define SIM_ARENA_MAX (1ull << 40)    /* addresses reserved per device at most */

static uint64_t round_up(uint64_t n, uint64_t to)
{
    return (n + to - 1) / to * to;
}

/* Where `span` bytes fit first in `phys`'s arena (0: nowhere); alloc_mu held. */
static uint64_t first_fit(int phys, uint64_t span, size_t *index)
{
    struct sim_arena *a = &sim_arenas[phys];
    uint64_t at = a->base;
    size_t i = 0;
    for (; i < alloc_count; i++) {
        const struct sim_alloc *x = &allocs[i];
        if (x->phys != phys)
            continue;
        if (x->ptr - at >= span)
            break;
        at = x->ptr + x->span;
    }
    if (at + span > a->base + a->reserved)
        return 0;
    /* Insert after every allocation below `at`, of any device. */
    size_t pos = 0;
    while (pos < alloc_count && allocs[pos].ptr < at)
        pos++;
    *index = pos;
    return at;
}

/* alloc_mu held. */
static bool arena_reserve(int phys, uint64_t total)
{
    struct sim_arena *a = &sim_arenas[phys];
    if (a->base != 0)
        return true;
    uint64_t size = round_up(total < SIM_ARENA_MAX ? total : SIM_ARENA_MAX, SIM_PAGE);
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return false;
    a->reserved = size;
    __atomic_store_n(&a->base, (uintptr_t)p, __ATOMIC_RELEASE);
    return true;
}

/* Maps the arena up to `end` (an address in it); alloc_mu held. */
static bool arena_map_to(int phys, uint64_t end)
{
    struct sim_arena *a = &sim_arenas[phys];
    uint64_t want = round_up(end - a->base, SIM_PAGE);
    if (want > a->reserved)
        want = a->reserved;
    if (want <= a->mapped)
        return true;
    if (mprotect((void *)(uintptr_t)(a->base + a->mapped), want - a->mapped, PROT_READ | PROT_WRITE) != 0)
        return false;
    __atomic_store_n(&a->mapped, want, __ATOMIC_RELEASE);
    return true;
}

static CUresult mem_alloc(CUdeviceptr *dptr, size_t bytesize)
{
    CHECK_INIT();
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = sim_ctx_current();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    int phys = ctx->phys;
    uint64_t total = sim_proc.shm->devices[phys].total_mem;
    if (bytesize > total || sim_device_mem_used(phys) > total - bytesize)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t span = round_up(bytesize, SIM_ALLOC_ALIGN);
    pthread_mutex_lock(&alloc_mu);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    size_t pos = 0;
    uint64_t at = 0;
    if (alloc_count == alloc_cap) {
        size_t cap = alloc_cap ? alloc_cap * 2 : 64;
        struct sim_alloc *grown = realloc(allocs, cap * sizeof *grown);
        if (!grown)
            goto out;
        allocs = grown;
        alloc_cap = cap;
    }
    if (!arena_reserve(phys, total) || (at = first_fit(phys, span, &pos)) == 0 || !arena_map_to(phys, at + span))
        goto out;
    memmove(&allocs[pos + 1], &allocs[pos], (alloc_count - pos) * sizeof allocs[0]);
    allocs[pos] = (struct sim_alloc){.ptr = at, .size = bytesize, .span = span, .phys = phys};
    alloc_count++;
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&alloc_mu);
    if (rc != CUDA_SUCCESS)
        return rc;
    __atomic_add_fetch(&sim_proc.slot->mem_used[phys], bytesize, __ATOMIC_RELAXED);
    *dptr = at;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    SIM_GATED(mem_alloc(dptr, bytesize));
}

/* The memory stays mapped, with what it held, for a later allocation. */
static CUresult mem_free(CUdeviceptr dptr)
{
    CHECK_INIT();
    if (dptr == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&alloc_mu);
    size_t i = 0;
    while (i < alloc_count && allocs[i].ptr != dptr)
        i++;
    if (i == alloc_count) {
        pthread_mutex_unlock(&alloc_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct sim_alloc a = allocs[i];
    memmove(&allocs[i], &allocs[i + 1], (alloc_count - i - 1) * sizeof allocs[0]);
    alloc_count--;
    pthread_mutex_unlock(&alloc_mu);
    __atomic_sub_fetch(&sim_proc.slot->mem_used[a.phys], a.size, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    SIM_GATED(mem_free(dptr));
}

static CUresult mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
    CHECK_INIT();
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = sim_ctx_current();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t total = sim_proc.shm->devices[ctx->phys].total_mem;
    uint64_t used = sim_device_mem_used(ctx->phys);
    *total_bytes = total;
    *free_bytes = used >= total ? 0 : total - used;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total)
{
    SIM_GATED(mem_get_info(free, total));
}

static CUresult mem_get_info_v1(unsigned int *free_bytes, unsigned int *total_bytes)
{
    size_t f = 0, t = 0;
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = mem_get_info(&f, &t);
    if (rc == CUDA_SUCCESS) {
        *free_bytes = f > 0xffffffffu ? 0xffffffffu : (unsigned int)f;
        *total_bytes = t > 0xffffffffu ? 0xffffffffu : (unsigned int)t;
    }
    return rc;
}

CUresult CUDAAPI cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    SIM_GATED(mem_get_info_v1(free, total));
}

/* Page-locked host memory: ordinary memory the process remembers as pinned
 * (simcuda_host_memory.c), so that copies from or to it cost what a DMA costs. */
static CUresult mem_alloc_host(void **pp, size_t bytesize)
{
    CHECK_INIT();
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_ctx_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (posix_memalign(pp, SIM_ALLOC_ALIGN, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = sim_host_pin(*pp, bytesize);
    if (rc != CUDA_SUCCESS) {
        free(*pp);
        *pp = NULL;
    }
    return rc;
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    SIM_GATED(mem_alloc_host(pp, bytesize));
}

CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize)
{
    SIM_GATED(mem_alloc_host(pp, bytesize));
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    SIM_GATED(mem_alloc_host(pp, bytesize));
}

static CUresult mem_free_host(void *p)
{
    CHECK_INIT();
    if (p != NULL && !sim_host_unpin(p))
        return CUDA_ERROR_INVALID_VALUE; /* not an allocation of cuMemAllocHost's */
    free(p);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    SIM_GATED(mem_free_host(p));
}

/* Copies and memsets are stream work: they take simulated time (bytes over
 * the simulated bandwidth) and count as device activity. The synchronous
 * forms queue on the default stream and wait for it. Their device side must
 * lie in mapped device memory (above); it stays mapped, so a copy queued
 * behind a cuMemFree still finds it. */
#define SIM_DST_DEVICE 1u
#define SIM_SRC_DEVICE 2u

static CUresult copy_async(void *dst, const void *src, size_t bytes, CUstream stream, uint16_t kind, unsigned device)
{
    CHECK_INIT();
    if ((!dst || !src) && bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes && (((device & SIM_DST_DEVICE) && !sim_device_range_mapped((uintptr_t)dst, bytes)) ||
                  ((device & SIM_SRC_DEVICE) && !sim_device_range_mapped((uintptr_t)src, bytes))))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS || bytes == 0)
        return rc;
    const void *host = !(device & SIM_SRC_DEVICE) ? src : !(device & SIM_DST_DEVICE) ? dst : NULL;
    return sim_enqueue_copy(s, dst, src, bytes, kind, host != NULL && !sim_host_pinned(host, bytes));
}

static CUresult copy_sync(void *dst, const void *src, size_t bytes, uint16_t kind, unsigned device)
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(NULL, &s);
    if (rc == CUDA_SUCCESS)
        rc = copy_async(dst, src, bytes, s, kind, device);
    if (rc == CUDA_SUCCESS)
        rc = sim_stream_synchronize(s);
    return rc;
}

#define DEVPTR(p) ((void *)(uintptr_t)(p))

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dstDevice), srcHost, ByteCount, KREX_SIM_LOG_MEMCPY_HTOD, SIM_DST_DEVICE));
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy_sync(dstHost, DEVPTR(srcDevice), ByteCount, KREX_SIM_LOG_MEMCPY_DTOH, SIM_SRC_DEVICE));
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dstDevice), DEVPTR(srcDevice), ByteCount, KREX_SIM_LOG_MEMCPY_DTOD, SIM_DST_DEVICE | SIM_SRC_DEVICE));
}

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dst), DEVPTR(src), ByteCount, KREX_SIM_LOG_MEMCPY_DTOD, SIM_DST_DEVICE | SIM_SRC_DEVICE));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dstDevice), srcHost, ByteCount, hStream, KREX_SIM_LOG_MEMCPY_HTOD, SIM_DST_DEVICE));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(dstHost, DEVPTR(srcDevice), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOH, SIM_SRC_DEVICE));
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dstDevice), DEVPTR(srcDevice), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOD, SIM_DST_DEVICE | SIM_SRC_DEVICE));
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dst), DEVPTR(src), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOD, SIM_DST_DEVICE | SIM_SRC_DEVICE));
}

static CUresult memset_async(CUdeviceptr dst, uint32_t value, unsigned int elem, size_t n, CUstream stream)
{
    CHECK_INIT();
    if (!dst && n)
        return CUDA_ERROR_INVALID_VALUE;
    if (n && (n > UINT64_MAX / elem || !sim_device_range_mapped(dst, n * elem)))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS || n == 0)
        return rc;
    return sim_enqueue_memset(s, DEVPTR(dst), value, elem, n);
}

static CUresult memset_sync(CUdeviceptr dst, uint32_t value, unsigned int elem, size_t n)
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(NULL, &s);
    if (rc == CUDA_SUCCESS)
        rc = memset_async(dst, value, elem, n, s);
    if (rc == CUDA_SUCCESS)
        rc = sim_stream_synchronize(s);
    return rc;
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    SIM_GATED(memset_sync(dstDevice, uc, 1, N));
}

CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    SIM_GATED(memset_sync(dstDevice, us, 2, N));
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    SIM_GATED(memset_sync(dstDevice, ui, 4, N));
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    SIM_GATED(memset_async(dstDevice, uc, 1, N, hStream));
}

CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    SIM_GATED(memset_async(dstDevice, us, 2, N, hStream));
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    SIM_GATED(memset_async(dstDevice, ui, 4, N, hStream));
}
