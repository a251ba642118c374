/*
 * Stream capture and graphs: the driver's, one to one. The runtime's capture
 * modes and statuses have the driver's values, and its graph handles are the
 * driver's. A _ptsz entry point's stream 0 is the per-thread one.
 */
#include "cudart.h"

#define CTX_OR_RETURN()                                                                                     \
    do {                                                                                                    \
        cudaError_t e_ = cudart_context(NULL);                                                              \
        if (e_ != cudaSuccess)                                                                              \
            return e_;                                                                                      \
    } while (0)

_Static_assert((int)cudaStreamCaptureModeGlobal == (int)CU_STREAM_CAPTURE_MODE_GLOBAL &&
                   (int)cudaStreamCaptureModeThreadLocal == (int)CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                   (int)cudaStreamCaptureModeRelaxed == (int)CU_STREAM_CAPTURE_MODE_RELAXED,
               "capture modes pass unchanged");
_Static_assert((int)cudaStreamCaptureStatusNone == (int)CU_STREAM_CAPTURE_STATUS_NONE &&
                   (int)cudaStreamCaptureStatusActive == (int)CU_STREAM_CAPTURE_STATUS_ACTIVE &&
                   (int)cudaStreamCaptureStatusInvalidated == (int)CU_STREAM_CAPTURE_STATUS_INVALIDATED,
               "capture statuses pass unchanged");

CUDART_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    CTX_OR_RETURN();
    return cudart_result(cuStreamBeginCapture((CUstream)stream, (CUstreamCaptureMode)mode));
}

CUDART_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    return cudaStreamBeginCapture(cudart_per_thread(stream), mode);
}

CUDART_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    if (pGraph == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CTX_OR_RETURN();
    return cudart_result(cuStreamEndCapture((CUstream)stream, (CUgraph *)pGraph));
}

CUDART_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    return cudaStreamEndCapture(cudart_per_thread(stream), pGraph);
}

CUDART_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    if (pCaptureStatus == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CTX_OR_RETURN();
    CUstreamCaptureStatus status;
    CUresult rc = cuStreamIsCapturing((CUstream)stream, &status);
    if (rc == CUDA_SUCCESS)
        *pCaptureStatus = (enum cudaStreamCaptureStatus)status;
    return cudart_result(rc);
}

CUDART_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                     enum cudaStreamCaptureStatus *pCaptureStatus)
{
    return cudaStreamIsCapturing(cudart_per_thread(stream), pCaptureStatus);
}

CUDART_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                                   unsigned long long *id_out, cudaGraph_t *graph_out,
                                                   const cudaGraphNode_t **dependencies_out,
                                                   const cudaGraphEdgeData **edgeData_out,
                                                   size_t *numDependencies_out)
{
    if (captureStatus_out == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CTX_OR_RETURN();
    CUstreamCaptureStatus status;
    cuuint64_t id = 0;
    CUresult rc = cuStreamGetCaptureInfo((CUstream)stream, &status, &id, (CUgraph *)graph_out,
                                         (const CUgraphNode **)dependencies_out,
                                         (const CUgraphEdgeData **)edgeData_out, numDependencies_out);
    if (rc == CUDA_SUCCESS) {
        *captureStatus_out = (enum cudaStreamCaptureStatus)status;
        if (id_out != NULL)
            *id_out = id;
    }
    return cudart_result(rc);
}

CUDART_EXPORT cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
                                                        enum cudaStreamCaptureStatus *captureStatus_out,
                                                        unsigned long long *id_out, cudaGraph_t *graph_out,
                                                        const cudaGraphNode_t **dependencies_out,
                                                        const cudaGraphEdgeData **edgeData_out,
                                                        size_t *numDependencies_out)
{
    return cudaStreamGetCaptureInfo(cudart_per_thread(stream), captureStatus_out, id_out, graph_out,
                                    dependencies_out, edgeData_out, numDependencies_out);
}

CUDART_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                        unsigned long long flags)
{
    if (pGraphExec == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CTX_OR_RETURN();
    return cudart_result(cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
}

CUDART_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                               unsigned long long flags)
{
    return cudaGraphInstantiateWithFlags(pGraphExec, graph, flags);
}

CUDART_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    CTX_OR_RETURN();
    return cudart_result(cuGraphLaunch((CUgraphExec)graphExec, (CUstream)stream));
}

CUDART_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return cudaGraphLaunch(graphExec, cudart_per_thread(stream));
}

CUDART_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    CTX_OR_RETURN();
    return cudart_result(cuGraphExecDestroy((CUgraphExec)graphExec));
}

CUDART_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    CTX_OR_RETURN();
    return cudart_result(cuGraphDestroy((CUgraph)graph));
}
