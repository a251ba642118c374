/*
 * Entry points of the forwarding client that never leave the process.
 *
 * Current contexts are per thread in the driver; here each thread keeps its
 * own stack of server context handles (client_context.c) and sends the top
 * one with every request (the server makes it current before it executes the
 * request). A handle is checked by the server where it is used, not here.
 *
 * Page-locked host memory is ordinary memory of the command: the GPU never
 * reads it directly, every copy passes through the segment.
 */
#include "client.h"

#include <pthread.h>

#include <stdlib.h>
#include <string.h>

FWD_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fwd_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    *pctx = fwd_ctx_current();
    return CUDA_SUCCESS;
}

FWD_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    if (!fwd_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    fwd_ctx_set(ctx);
    return CUDA_SUCCESS;
}

FWD_EXPORT CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
    if (!fwd_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    return fwd_ctx_push(ctx) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FWD_EXPORT CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
    if (!fwd_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUcontext c;
    if (!fwd_ctx_pop(&c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx != NULL)
        *pctx = c;
    return CUDA_SUCCESS;
}

/* ---- error strings: the table the simulator's build makes from cuda.h -------- */

struct fwd_error {
    CUresult code;
    const char *name;
    const char *text;
};

static const struct fwd_error errors[] = {
#include "simcuda_errors.inc"
};

static const struct fwd_error *find_error(CUresult code)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == code)
            return &errors[i];
    return NULL;
}

FWD_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fwd_error *e = find_error(error);
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FWD_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fwd_error *e = find_error(error);
    *pStr = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- page-locked host memory: ordinary memory here ---------------------------- */

/* What the program pinned, remembered so that an asynchronous copy from or to
 * it can be counted as staged (fwd_count_staged_pinned): in forwarded mode its
 * bytes travel through the segment, not in one DMA from the pinned pages. */
#define PINNED_SLOTS 1024
static struct {
    uintptr_t base;
    size_t size;
    bool allocated; /* ours to free (cuMemAllocHost), not registered */
} pinned[PINNED_SLOTS];
static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;

static void pin(void *p, size_t n, bool allocated)
{
    pthread_mutex_lock(&pinned_lock);
    for (size_t i = 0; i < PINNED_SLOTS; i++)
        if (pinned[i].base == 0) {
            pinned[i].base = (uintptr_t)p, pinned[i].size = n, pinned[i].allocated = allocated;
            break;
        }
    pthread_mutex_unlock(&pinned_lock);
}

/* Forgets [p...]; false when p starts nothing pinned. */
static bool unpin(void *p, bool allocated)
{
    bool found = false;
    pthread_mutex_lock(&pinned_lock);
    for (size_t i = 0; i < PINNED_SLOTS; i++)
        if (pinned[i].base == (uintptr_t)p && pinned[i].allocated == allocated) {
            pinned[i].base = 0, found = true;
            break;
        }
    pthread_mutex_unlock(&pinned_lock);
    return found;
}

bool fwd_page_locked(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    bool inside = false;
    pthread_mutex_lock(&pinned_lock);
    for (size_t i = 0; i < PINNED_SLOTS && !inside; i++)
        inside = pinned[i].base != 0 && a >= pinned[i].base && a - pinned[i].base + n <= pinned[i].size;
    pthread_mutex_unlock(&pinned_lock);
    return inside;
}

static CUresult host_alloc(void **pp, size_t bytesize)
{
    if (pp == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fwd_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (posix_memalign(pp, 4096, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pin(*pp, bytesize, true);
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

FWD_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
    unpin(p, true);
    free(p);
    return CUDA_SUCCESS;
}

/* Registering pins nothing here (the server cannot reach the program's
 * pages); mapped registrations need a device address of host memory, which
 * forwarded mode cannot give. */
FWD_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    if (Flags & (CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY))
        return fwd_unknown("cuMemHostRegister(CU_MEMHOSTREGISTER_DEVICEMAP)");
    if (p == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fwd_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (fwd_page_locked(p, 1))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    pin(p, bytesize, false);
    return CUDA_SUCCESS;
}

FWD_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    if (!fwd_initialised())
        return CUDA_ERROR_NOT_INITIALIZED;
    return unpin(p, false) ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* Stream capture is not forwarded, so no stream of this process is ever
 * captured: the mode is kept per thread and only exchanged (the drain
 * helper of the interception library relaxes it on its own thread). */
static __thread CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

FWD_EXPORT CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (mode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* The driver's private tables, which only the CUDA runtime asks for: a
 * program that asks carries its own runtime (cudart linked statically, nvcc's
 * default, or a libcudart loaded by its path), whose state lives in tables of
 * this process's driver and cannot be forwarded. The runtime names the
 * reason from this call's name; built with `nvcc -cudart shared`, the program
 * loads forwarded mode's libcudart instead and runs forwarded. */
FWD_EXPORT CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    (void)pExportTableId;
    if (ppExportTable != NULL)
        *ppExportTable = NULL;
    static int told;
    if (!__atomic_exchange_n(&told, 1, __ATOMIC_ACQ_REL))
        fwd_log("the program carries its own CUDA runtime (cudart linked statically, or a libcudart loaded by "
                "path), which asks for the driver's private tables (cuGetExportTable): build it with "
                "`nvcc -cudart shared` to run it forwarded");
    return fwd_unknown("cuGetExportTable");
}
