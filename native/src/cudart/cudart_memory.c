/*
 * Memory: device allocations, copies, memsets, page-locked host memory and
 * registered variables (symbols).
 *
 * Allocations are remembered (base, size, device) so that cudaMemcpyDefault
 * can tell a device pointer from a host one, as unified addressing lets the
 * real runtime do, and so that cudaDeviceReset can free them. Page-locked
 * host memory is the driver's (cuMemAllocHost): in forwarded mode the client
 * makes it ordinary memory of the command, every copy passes the segment.
 */
#include "cudart.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct allocation {
    CUdeviceptr base;
    size_t size;
    int device;
    struct allocation *next;
};

static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct allocation *allocations;

static void remember(CUdeviceptr base, size_t size, int device)
{
    struct allocation *a = malloc(sizeof *a);
    if (a == NULL)
        return; /* only cudaMemcpyDefault's guess and reset's cleanup lose it */
    *a = (struct allocation){base, size, device, NULL};
    pthread_mutex_lock(&alloc_lock);
    a->next = allocations;
    allocations = a;
    pthread_mutex_unlock(&alloc_lock);
}

static bool forget(CUdeviceptr base)
{
    pthread_mutex_lock(&alloc_lock);
    struct allocation **p = &allocations;
    while (*p != NULL && (*p)->base != base)
        p = &(*p)->next;
    struct allocation *a = *p;
    if (a != NULL)
        *p = a->next;
    pthread_mutex_unlock(&alloc_lock);
    free(a);
    return a != NULL;
}

static bool is_device(const void *ptr)
{
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    pthread_mutex_lock(&alloc_lock);
    struct allocation *a = allocations;
    while (a != NULL && !(p >= a->base && p < a->base + a->size))
        a = a->next;
    pthread_mutex_unlock(&alloc_lock);
    return a != NULL;
}

void cudart_free_device_memory(int device)
{
    pthread_mutex_lock(&alloc_lock);
    struct allocation **p = &allocations;
    while (*p != NULL) {
        struct allocation *a = *p;
        if (a->device == device) {
            cuMemFree(a->base);
            *p = a->next;
            free(a);
        } else {
            p = &a->next;
        }
    }
    pthread_mutex_unlock(&alloc_lock);
}

CUDART_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    if (devPtr == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    int dev;
    cudaError_t err = cudart_context(&dev);
    if (err != cudaSuccess)
        return err;
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    err = cudart_result(cuMemAlloc(&p, size));
    if (err == cudaSuccess) {
        remember(p, size, dev);
        *devPtr = (void *)(uintptr_t)p;
    }
    return err;
}

/* cudaFree(0) is the idiom that initialises the context. */
CUDART_EXPORT cudaError_t cudaFree(void *devPtr)
{
    cudaError_t err = cudart_context(NULL);
    if (err != cudaSuccess || devPtr == NULL)
        return err;
    forget((CUdeviceptr)(uintptr_t)devPtr);
    return cudart_result(cuMemFree((CUdeviceptr)(uintptr_t)devPtr));
}

CUDART_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    cudaError_t err = cudart_context(NULL);
    return err != cudaSuccess ? err : cudart_result(cuMemAllocHost(ptr, size));
}

CUDART_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    cudaError_t err = cudart_context(NULL);
    /* cudaHostAlloc's flags are cuMemHostAlloc's (portable 1, mapped 2, write-combined 4). */
    return err != cudaSuccess ? err : cudart_result(cuMemHostAlloc(pHost, size, flags));
}

CUDART_EXPORT cudaError_t cudaFreeHost(void *ptr)
{
    cudaError_t err = cudart_context(NULL);
    return err != cudaSuccess ? err : cudart_result(cuMemFreeHost(ptr));
}

/* cudaHostRegister's flags are cuMemHostRegister's (portable 1, mapped 2,
 * I/O memory 4, read-only 8). */
CUDART_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    cudaError_t err = cudart_context(NULL);
    return err != cudaSuccess ? err : cudart_result(cuMemHostRegister(ptr, size, flags));
}

CUDART_EXPORT cudaError_t cudaHostUnregister(void *ptr)
{
    cudaError_t err = cudart_context(NULL);
    return err != cudaSuccess ? err : cudart_result(cuMemHostUnregister(ptr));
}

/* ---- copies ----------------------------------------------------------------------------- */

static enum cudaMemcpyKind resolve_kind(void *dst, const void *src, enum cudaMemcpyKind kind)
{
    if (kind != cudaMemcpyDefault)
        return kind;
    bool d = is_device(dst), s = is_device(src);
    return d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
             : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))

/* A synchronous copy (stream NULL, sync) or one on a stream. Host-to-host is
 * done here; on a stream it first waits for the stream, as it is ordered there. */
static cudaError_t copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream,
                        bool async)
{
    cudaError_t err = cudart_context(NULL);
    if (err != cudaSuccess)
        return err;
    if (count == 0)
        return cudaSuccess;
    if (dst == NULL || src == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CUstream s = (CUstream)stream;
    switch (resolve_kind(dst, src, kind)) {
    case cudaMemcpyHostToDevice:
        return cudart_result(async ? cuMemcpyHtoDAsync(DPTR(dst), src, count, s) : cuMemcpyHtoD(DPTR(dst), src, count));
    case cudaMemcpyDeviceToHost:
        return cudart_result(async ? cuMemcpyDtoHAsync(dst, DPTR(src), count, s) : cuMemcpyDtoH(dst, DPTR(src), count));
    case cudaMemcpyDeviceToDevice:
        return cudart_result(async ? cuMemcpyDtoDAsync(DPTR(dst), DPTR(src), count, s)
                                   : cuMemcpyDtoD(DPTR(dst), DPTR(src), count));
    case cudaMemcpyHostToHost:
        if (async && (err = cudart_result(cuStreamSynchronize(s))) != cudaSuccess)
            return err;
        memmove(dst, src, count);
        return cudaSuccess;
    default:
        return cudart_fail(cudaErrorInvalidMemcpyDirection);
    }
}

CUDART_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return copy(dst, src, count, kind, NULL, false);
}

/* The per-thread default stream's synchronous copy: on that stream, then waited for. */
CUDART_EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    cudaError_t err = copy(dst, src, count, kind, cudaStreamPerThread, true);
    return err != cudaSuccess ? err : cudart_result(cuStreamSynchronize(CU_STREAM_PER_THREAD));
}

CUDART_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                          cudaStream_t stream)
{
    return copy(dst, src, count, kind, stream, true);
}

CUDART_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                               cudaStream_t stream)
{
    return copy(dst, src, count, kind, cudart_per_thread(stream), true);
}

static cudaError_t fill(void *devPtr, int value, size_t count, cudaStream_t stream, bool async)
{
    cudaError_t err = cudart_context(NULL);
    if (err != cudaSuccess || count == 0)
        return err;
    return cudart_result(async ? cuMemsetD8Async(DPTR(devPtr), (unsigned char)value, count, (CUstream)stream)
                               : cuMemsetD8(DPTR(devPtr), (unsigned char)value, count));
}

CUDART_EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    return fill(devPtr, value, count, NULL, false);
}

CUDART_EXPORT cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
    cudaError_t err = fill(devPtr, value, count, cudaStreamPerThread, true);
    return err != cudaSuccess ? err : cudart_result(cuStreamSynchronize(CU_STREAM_PER_THREAD));
}

CUDART_EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    return fill(devPtr, value, count, stream, true);
}

CUDART_EXPORT cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    return fill(devPtr, value, count, cudart_per_thread(stream), true);
}

/* ---- registered variables ------------------------------------------------------------------ */

CUDART_EXPORT cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
    if (devPtr == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CUdeviceptr p;
    cudaError_t err = cudart_symbol(symbol, &p, NULL);
    if (err == cudaSuccess)
        *devPtr = (void *)(uintptr_t)p;
    return err;
}

CUDART_EXPORT cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol)
{
    if (size == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CUdeviceptr p;
    return cudart_symbol(symbol, &p, size);
}

static cudaError_t symbol_copy(void *host, const void *symbol, size_t count, size_t offset, bool to_symbol,
                               cudaStream_t stream, bool async)
{
    CUdeviceptr p;
    size_t size;
    cudaError_t err = cudart_symbol(symbol, &p, &size);
    if (err != cudaSuccess)
        return err;
    if (offset > size || count > size - offset)
        return cudart_fail(cudaErrorInvalidValue);
    void *dev = (void *)(uintptr_t)(p + offset);
    if (to_symbol)
        return copy(dev, host, count, cudaMemcpyHostToDevice, stream, async);
    return copy(host, dev, count, cudaMemcpyDeviceToHost, stream, async);
}

/* kind: cudaMemcpyHostToDevice or cudaMemcpyDefault (the host side); a
 * device-to-device copy to a symbol is not among the common uses. */
static cudaError_t host_side(enum cudaMemcpyKind kind, enum cudaMemcpyKind host_kind)
{
    return kind == host_kind || kind == cudaMemcpyDefault ? cudaSuccess : cudart_unknown(
        "cudaMemcpyToSymbol/FromSymbol with device memory (cudaMemcpyDeviceToDevice)");
}

CUDART_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
                                             enum cudaMemcpyKind kind)
{
    cudaError_t err = host_side(kind, cudaMemcpyHostToDevice);
    return err != cudaSuccess ? err : symbol_copy((void *)src, symbol, count, offset, true, NULL, false);
}

CUDART_EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count, size_t offset,
                                               enum cudaMemcpyKind kind)
{
    cudaError_t err = host_side(kind, cudaMemcpyDeviceToHost);
    return err != cudaSuccess ? err : symbol_copy(dst, symbol, count, offset, false, NULL, false);
}

CUDART_EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count, size_t offset,
                                                  enum cudaMemcpyKind kind, cudaStream_t stream)
{
    cudaError_t err = host_side(kind, cudaMemcpyHostToDevice);
    return err != cudaSuccess ? err : symbol_copy((void *)src, symbol, count, offset, true, stream, true);
}

CUDART_EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count, size_t offset,
                                                    enum cudaMemcpyKind kind, cudaStream_t stream)
{
    cudaError_t err = host_side(kind, cudaMemcpyDeviceToHost);
    return err != cudaSuccess ? err : symbol_copy(dst, symbol, count, offset, false, stream, true);
}
