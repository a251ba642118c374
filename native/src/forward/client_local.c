/*
 * Entry points of the forwarding client that never leave the process.
 *
 * Current contexts are per thread in the driver; here each thread keeps its
 * own stack of server context handles (client_context.c) and sends the top
 * one with every request (the server makes it current before it executes the
 * request). A handle is checked by the server where it is used, not here.
 *
 * Page-locked host memory has its own file (client_pinned.c).
 */
#include "client.h"

#include <pthread.h>
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
