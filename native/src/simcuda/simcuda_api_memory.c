/*
 * Driver entry points: allocations, copies and memsets.
 */
#include "simcuda_internal.h"

#include <stdlib.h>

/* ---- memory: device memory is host memory ------------------------------------- */

struct sim_alloc {
    CUdeviceptr ptr;
    size_t size;
    int phys;
};

static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sim_alloc *allocs;
static size_t alloc_count, alloc_cap;

#define SIM_ALLOC_ALIGN 256

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
    void *p = NULL;
    if (posix_memalign(&p, SIM_ALLOC_ALIGN, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&alloc_mu);
    if (alloc_count == alloc_cap) {
        size_t cap = alloc_cap ? alloc_cap * 2 : 64;
        struct sim_alloc *grown = realloc(allocs, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&alloc_mu);
            free(p);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        allocs = grown;
        alloc_cap = cap;
    }
    allocs[alloc_count++] = (struct sim_alloc){.ptr = (CUdeviceptr)(uintptr_t)p, .size = bytesize, .phys = phys};
    pthread_mutex_unlock(&alloc_mu);
    __atomic_add_fetch(&sim_proc.slot->mem_used[phys], bytesize, __ATOMIC_RELAXED);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    SIM_GATED(mem_alloc(dptr, bytesize));
}

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
    allocs[i] = allocs[--alloc_count];
    pthread_mutex_unlock(&alloc_mu);
    __atomic_sub_fetch(&sim_proc.slot->mem_used[a.phys], a.size, __ATOMIC_RELAXED);
    free((void *)(uintptr_t)a.ptr);
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

/* Page-locked host memory is ordinary host memory here. */
static CUresult mem_alloc_host(void **pp, size_t bytesize)
{
    CHECK_INIT();
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_ctx_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    return posix_memalign(pp, SIM_ALLOC_ALIGN, bytesize) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
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
    free(p);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    SIM_GATED(mem_free_host(p));
}

/* Copies and memsets are stream work: they take simulated time (bytes over
 * the simulated bandwidth) and count as device activity. The synchronous
 * forms queue on the default stream and wait for it. */
static CUresult copy_async(void *dst, const void *src, size_t bytes, CUstream stream, uint16_t kind)
{
    CHECK_INIT();
    if ((!dst || !src) && bytes)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS || bytes == 0)
        return rc;
    return sim_enqueue_copy(s, dst, src, bytes, kind);
}

static CUresult copy_sync(void *dst, const void *src, size_t bytes, uint16_t kind)
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(NULL, &s);
    if (rc == CUDA_SUCCESS)
        rc = copy_async(dst, src, bytes, s, kind);
    if (rc == CUDA_SUCCESS)
        rc = sim_stream_synchronize(s);
    return rc;
}

#define DEVPTR(p) ((void *)(uintptr_t)(p))

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dstDevice), srcHost, ByteCount, KREX_SIM_LOG_MEMCPY_HTOD));
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy_sync(dstHost, DEVPTR(srcDevice), ByteCount, KREX_SIM_LOG_MEMCPY_DTOH));
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dstDevice), DEVPTR(srcDevice), ByteCount, KREX_SIM_LOG_MEMCPY_DTOD));
}

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dst), DEVPTR(src), ByteCount, KREX_SIM_LOG_MEMCPY_DTOD));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dstDevice), srcHost, ByteCount, hStream, KREX_SIM_LOG_MEMCPY_HTOD));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(dstHost, DEVPTR(srcDevice), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOH));
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dstDevice), DEVPTR(srcDevice), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOD));
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dst), DEVPTR(src), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOD));
}

static CUresult memset_async(CUdeviceptr dst, uint32_t value, unsigned int elem, size_t n, CUstream stream)
{
    CHECK_INIT();
    if (!dst && n)
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
