/*
 * Allocations, copies and memsets of the simulated HIP runtime: the
 * simulated driver's, on the calling thread's current device. Device memory
 * is host memory there (one address space), so hipMemcpyDefault copies as
 * device to device.
 */
#include "simhip_internal.h"

#include <string.h>

static CUdeviceptr dev(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

SIMHIP_EXPORT hipError_t hipMalloc(void **ptr, size_t size)
{
    if (ptr == NULL)
        return simhip_fail(hipErrorInvalidValue);
    READY();
    CUdeviceptr d = 0;
    hipError_t e = simhip_result(cuMemAlloc(&d, size));
    *ptr = e == hipSuccess ? (void *)(uintptr_t)d : NULL;
    return e;
}

SIMHIP_EXPORT hipError_t hipFree(void *ptr)
{
    READY();
    return simhip_result(cuMemFree(dev(ptr)));
}

SIMHIP_EXPORT hipError_t hipMemGetInfo(size_t *free, size_t *total)
{
    READY();
    return simhip_result(cuMemGetInfo(free, total));
}

static hipError_t copy(void *dst, const void *src, size_t n, hipMemcpyKind kind, bool async, hipStream_t stream)
{
    READY();
    CUstream s = (CUstream)stream;
    switch (kind) {
    case hipMemcpyHostToHost:
        if (async && hipStreamSynchronize(stream) != hipSuccess)
            return hipGetLastError();
        memcpy(dst, src, n);
        return hipSuccess;
    case hipMemcpyHostToDevice:
        return simhip_result(async ? cuMemcpyHtoDAsync(dev(dst), src, n, s) : cuMemcpyHtoD(dev(dst), src, n));
    case hipMemcpyDeviceToHost:
        return simhip_result(async ? cuMemcpyDtoHAsync(dst, dev(src), n, s) : cuMemcpyDtoH(dst, dev(src), n));
    case hipMemcpyDeviceToDevice:
    case hipMemcpyDefault:
        return simhip_result(async ? cuMemcpyDtoDAsync(dev(dst), dev(src), n, s) : cuMemcpyDtoD(dev(dst), dev(src), n));
    default:
        return simhip_fail(hipErrorInvalidMemcpyDirection);
    }
}

SIMHIP_EXPORT hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind)
{
    return copy(dst, src, sizeBytes, kind, false, NULL);
}

SIMHIP_EXPORT hipError_t hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind,
                                        hipStream_t stream)
{
    return copy(dst, src, sizeBytes, kind, true, stream);
}

SIMHIP_EXPORT hipError_t hipMemcpyHtoD(hipDeviceptr_t dst, void *src, size_t sizeBytes)
{
    return copy(dst, src, sizeBytes, hipMemcpyHostToDevice, false, NULL);
}

SIMHIP_EXPORT hipError_t hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t sizeBytes)
{
    return copy(dst, src, sizeBytes, hipMemcpyDeviceToHost, false, NULL);
}

SIMHIP_EXPORT hipError_t hipMemcpyDtoD(hipDeviceptr_t dst, hipDeviceptr_t src, size_t sizeBytes)
{
    return copy(dst, src, sizeBytes, hipMemcpyDeviceToDevice, false, NULL);
}

SIMHIP_EXPORT hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void *src, size_t sizeBytes, hipStream_t stream)
{
    return copy(dst, src, sizeBytes, hipMemcpyHostToDevice, true, stream);
}

SIMHIP_EXPORT hipError_t hipMemcpyDtoHAsync(void *dst, hipDeviceptr_t src, size_t sizeBytes, hipStream_t stream)
{
    return copy(dst, src, sizeBytes, hipMemcpyDeviceToHost, true, stream);
}

SIMHIP_EXPORT hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t sizeBytes,
                                            hipStream_t stream)
{
    return copy(dst, src, sizeBytes, hipMemcpyDeviceToDevice, true, stream);
}

SIMHIP_EXPORT hipError_t hipMemset(void *dst, int value, size_t sizeBytes)
{
    READY();
    return simhip_result(cuMemsetD8(dev(dst), (unsigned char)value, sizeBytes));
}

SIMHIP_EXPORT hipError_t hipMemsetAsync(void *dst, int value, size_t sizeBytes, hipStream_t stream)
{
    READY();
    return simhip_result(cuMemsetD8Async(dev(dst), (unsigned char)value, sizeBytes, (CUstream)stream));
}

SIMHIP_EXPORT hipError_t hipMemsetD32(hipDeviceptr_t dest, int value, size_t count)
{
    READY();
    return simhip_result(cuMemsetD32(dev(dest), (unsigned int)value, count));
}

SIMHIP_EXPORT hipError_t hipMemsetD32Async(hipDeviceptr_t dst, int value, size_t count, hipStream_t stream)
{
    READY();
    return simhip_result(cuMemsetD32Async(dev(dst), (unsigned int)value, count, (CUstream)stream));
}
