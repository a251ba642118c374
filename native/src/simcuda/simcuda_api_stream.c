/*
 * Driver entry points: streams and events. The queues and their workers
 * are simcuda_stream.c's.
 */
#include "simcuda_internal.h"


/* ---- streams ------------------------------------------------------------------------- */

static CUresult stream_create(CUstream *phStream, unsigned int flags, int priority)
{
    CHECK_INIT();
    if (!phStream || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = sim_ctx_current();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    return sim_stream_create(ctx, flags, priority, phStream);
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    SIM_GATED(stream_create(phStream, Flags, 0));
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    SIM_GATED(stream_create(phStream, flags, priority));
}

static CUresult stream_destroy(CUstream stream)
{
    CHECK_INIT();
    return sim_stream_destroy(stream);
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    SIM_GATED(stream_destroy(hStream));
}

/* `wait` (synchronise or query) on the stream the handle names. */
static CUresult on_stream(CUstream stream, CUresult (*wait)(struct CUstream_st *))
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    return rc == CUDA_SUCCESS ? wait(s) : rc;
}

static CUresult stream_synchronize(CUstream stream)
{
    return on_stream(stream, sim_stream_synchronize);
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    SIM_GATED(stream_synchronize(hStream));
}

static CUresult stream_query(CUstream stream)
{
    return on_stream(stream, sim_stream_query);
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    SIM_GATED(stream_query(hStream));
}

static CUresult stream_wait_event(CUstream stream, CUevent ev, unsigned int flags)
{
    CHECK_INIT();
    if (flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    return rc == CUDA_SUCCESS ? sim_stream_wait_event(s, ev) : rc;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    SIM_GATED(stream_wait_event(hStream, hEvent, Flags));
}

static CUresult stream_get(CUstream stream, int *priority, unsigned int *flags, unsigned long long *id,
                           CUcontext *pctx)
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (priority)
        *priority = s->priority;
    if (flags)
        *flags = s->flags;
    if (id)
        *id = s->id;
    if (pctx)
        *pctx = s->ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority)
{
    SIM_GATED(priority ? stream_get(hStream, priority, NULL, NULL, NULL) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    SIM_GATED(flags ? stream_get(hStream, NULL, flags, NULL, NULL) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    SIM_GATED(streamId ? stream_get(hStream, NULL, NULL, streamId, NULL) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    SIM_GATED(pctx ? stream_get(hStream, NULL, NULL, NULL, pctx) : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    if (pGreenCtx)
        *pGreenCtx = NULL; /* no green contexts on the simulator */
    SIM_GATED(pCtx ? stream_get(hStream, NULL, NULL, NULL, pCtx) : CUDA_ERROR_INVALID_VALUE);
}

/* The per-thread capture mode is kept, as callers save and restore it; no
 * call of the simulator is refused for it (see docs/simulator.md). */
static _Thread_local CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static CUresult exchange_capture_mode(CUstreamCaptureMode *mode)
{
    CHECK_INIT();
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    SIM_GATED(exchange_capture_mode(mode));
}

/* ---- events ------------------------------------------------------------------------- */

static CUresult event_create(CUevent *phEvent, unsigned int flags)
{
    CHECK_INIT();
    if (!phEvent)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_ctx_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    return sim_event_create(flags, phEvent);
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    SIM_GATED(event_create(phEvent, Flags));
}

static CUresult event_record(CUevent ev, CUstream stream)
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    return rc == CUDA_SUCCESS ? sim_event_record(ev, s) : rc;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    SIM_GATED(event_record(hEvent, hStream));
}

CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    (void)flags;
    SIM_GATED(event_record(hEvent, hStream));
}

static CUresult event_query(CUevent ev)
{
    CHECK_INIT();
    return sim_event_query(ev);
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    SIM_GATED(event_query(hEvent));
}

static CUresult event_synchronize(CUevent ev)
{
    CHECK_INIT();
    return sim_event_synchronize(ev);
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    SIM_GATED(event_synchronize(hEvent));
}

static CUresult event_elapsed(float *ms, CUevent start, CUevent end)
{
    CHECK_INIT();
    return sim_event_elapsed(ms, start, end);
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    SIM_GATED(event_elapsed(pMilliseconds, hStart, hEnd));
}

static CUresult event_destroy(CUevent ev)
{
    CHECK_INIT();
    return sim_event_destroy(ev);
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
    SIM_GATED(event_destroy(hEvent));
}
