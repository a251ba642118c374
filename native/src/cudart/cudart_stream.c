/*
 * Streams and events: the driver's, one to one. The runtime's flags and
 * special stream handles have the driver's values (cudaStreamNonBlocking 1,
 * cudaEventDisableTiming 2, cudaStreamLegacy 1, cudaStreamPerThread 2), so
 * they pass unchanged. A _ptsz entry point's stream 0 is the per-thread one.
 */
#include "cudart.h"

#define CTX_OR_RETURN()                                                                                     \
    do {                                                                                                    \
        cudaError_t e_ = cudart_context(NULL);                                                              \
        if (e_ != cudaSuccess)                                                                              \
            return e_;                                                                                      \
    } while (0)

CUDART_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    if (pStream == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CTX_OR_RETURN();
    return cudart_result(cuStreamCreateWithPriority((CUstream *)pStream, flags, priority));
}

CUDART_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    return cudaStreamCreateWithPriority(pStream, flags, 0);
}

CUDART_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}

CUDART_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    CTX_OR_RETURN();
    return cudart_result(cuStreamDestroy((CUstream)stream));
}

CUDART_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    CTX_OR_RETURN();
    return cudart_result(cuStreamSynchronize((CUstream)stream));
}

CUDART_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    return cudaStreamSynchronize(cudart_per_thread(stream));
}

CUDART_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    CTX_OR_RETURN();
    return cudart_result(cuStreamQuery((CUstream)stream));
}

CUDART_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
    return cudaStreamQuery(cudart_per_thread(stream));
}

CUDART_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    CTX_OR_RETURN();
    return cudart_result(cuStreamWaitEvent((CUstream)stream, (CUevent)event, flags));
}

CUDART_EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    return cudaStreamWaitEvent(cudart_per_thread(stream), event, flags);
}

CUDART_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (event == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CTX_OR_RETURN();
    return cudart_result(cuEventCreate((CUevent *)event, flags));
}

CUDART_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

CUDART_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    CTX_OR_RETURN();
    return cudart_result(cuEventDestroy((CUevent)event));
}

CUDART_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
    CTX_OR_RETURN();
    return cudart_result(cuEventRecordWithFlags((CUevent)event, (CUstream)stream, flags));
}

CUDART_EXPORT cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
    return cudaEventRecordWithFlags(event, cudart_per_thread(stream), flags);
}

CUDART_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    CTX_OR_RETURN();
    return cudart_result(cuEventRecord((CUevent)event, (CUstream)stream));
}

CUDART_EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
    return cudaEventRecord(event, cudart_per_thread(stream));
}

CUDART_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    CTX_OR_RETURN();
    return cudart_result(cuEventSynchronize((CUevent)event));
}

CUDART_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
    CTX_OR_RETURN();
    return cudart_result(cuEventQuery((CUevent)event));
}

CUDART_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (ms == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CTX_OR_RETURN();
    return cudart_result(cuEventElapsedTime(ms, (CUevent)start, (CUevent)end));
}
