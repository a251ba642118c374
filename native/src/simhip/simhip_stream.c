/*
 * Streams, events, the stream-capture mode and hipGetProcAddress of the
 * simulated HIP runtime. A hipStream_t is the simulated driver's stream on
 * the device that was current when it was made; the null stream is the
 * current device's default stream.
 */
#include "simhip_internal.h"

#include <dlfcn.h>
#include <string.h>

SIMHIP_EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags)
{
    READY();
    return simhip_result(cuStreamCreate((CUstream *)stream, flags & hipStreamNonBlocking ? CU_STREAM_NON_BLOCKING : 0));
}

SIMHIP_EXPORT hipError_t hipStreamCreate(hipStream_t *stream)
{
    return hipStreamCreateWithFlags(stream, hipStreamDefault);
}

SIMHIP_EXPORT hipError_t hipStreamDestroy(hipStream_t stream)
{
    READY();
    return simhip_result(cuStreamDestroy((CUstream)stream));
}

SIMHIP_EXPORT hipError_t hipStreamSynchronize(hipStream_t stream)
{
    READY();
    return simhip_result(cuStreamSynchronize((CUstream)stream));
}

SIMHIP_EXPORT hipError_t hipStreamQuery(hipStream_t stream)
{
    READY();
    return simhip_result(cuStreamQuery((CUstream)stream));
}

SIMHIP_EXPORT hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags)
{
    READY();
    return simhip_result(cuStreamWaitEvent((CUstream)stream, (CUevent)event, flags));
}

SIMHIP_EXPORT hipError_t hipStreamGetFlags(hipStream_t stream, unsigned int *flags)
{
    if (flags == NULL)
        return simhip_fail(hipErrorInvalidValue);
    READY();
    unsigned int cu = 0;
    hipError_t e = simhip_result(cuStreamGetFlags((CUstream)stream, &cu));
    if (e == hipSuccess)
        *flags = cu & CU_STREAM_NON_BLOCKING ? hipStreamNonBlocking : hipStreamDefault;
    return e;
}

SIMHIP_EXPORT hipError_t hipThreadExchangeStreamCaptureMode(hipStreamCaptureMode *mode)
{
    if (mode == NULL)
        return simhip_fail(hipErrorInvalidValue);
    CUstreamCaptureMode cu = *mode == hipStreamCaptureModeRelaxed         ? CU_STREAM_CAPTURE_MODE_RELAXED
                             : *mode == hipStreamCaptureModeThreadLocal ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                                                                        : CU_STREAM_CAPTURE_MODE_GLOBAL;
    hipError_t e = simhip_result(cuThreadExchangeStreamCaptureMode(&cu));
    if (e == hipSuccess)
        *mode = cu == CU_STREAM_CAPTURE_MODE_RELAXED        ? hipStreamCaptureModeRelaxed
                : cu == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? hipStreamCaptureModeThreadLocal
                                                            : hipStreamCaptureModeGlobal;
    return e;
}

SIMHIP_EXPORT hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags)
{
    READY();
    return simhip_result(cuEventCreate((CUevent *)event, flags & hipEventDisableTiming ? CU_EVENT_DISABLE_TIMING : 0));
}

SIMHIP_EXPORT hipError_t hipEventCreate(hipEvent_t *event)
{
    return hipEventCreateWithFlags(event, hipEventDefault);
}

SIMHIP_EXPORT hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream)
{
    READY();
    return simhip_result(cuEventRecord((CUevent)event, (CUstream)stream));
}

SIMHIP_EXPORT hipError_t hipEventSynchronize(hipEvent_t event)
{
    READY();
    return simhip_result(cuEventSynchronize((CUevent)event));
}

SIMHIP_EXPORT hipError_t hipEventQuery(hipEvent_t event)
{
    READY();
    return simhip_result(cuEventQuery((CUevent)event));
}

SIMHIP_EXPORT hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop)
{
    READY();
    return simhip_result(cuEventElapsedTime(ms, (CUevent)start, (CUevent)stop));
}

SIMHIP_EXPORT hipError_t hipEventDestroy(hipEvent_t event)
{
    READY();
    return simhip_result(cuEventDestroy((CUevent)event));
}

/* ROCm 6.2's resolver (not in the headers built against, so its prototype
 * is here): this runtime's own entry point of that name. */
SIMHIP_EXPORT hipError_t hipGetProcAddress(const char *symbol, void **pfn, int hipVersion, uint64_t flags,
                                           int *symbolStatus);
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int hipVersion, uint64_t flags, int *symbolStatus)
{
    (void)hipVersion;
    (void)flags;
    if (symbol == NULL || pfn == NULL || strncmp(symbol, "hip", 3) != 0)
        return simhip_fail(hipErrorInvalidValue);
    Dl_info self;
    void *handle = dladdr((void *)hipGetProcAddress, &self) != 0 ? dlopen(self.dli_fname, RTLD_NOLOAD | RTLD_LAZY) : NULL;
    /* dlsym on our own handle: the definition in this library, not an interposer's. */
    *pfn = handle != NULL ? dlsym(handle, symbol) : NULL;
    if (handle != NULL)
        dlclose(handle);
    if (symbolStatus != NULL)
        *symbolStatus = *pfn != NULL ? 0 : 1;
    return *pfn != NULL ? hipSuccess : simhip_fail(hipErrorNotFound);
}
