/*
 * cuGetProcAddress: maps (name, requested CUDA version, stream flavour) to
 * one of the simulator's own functions, following the driver's versioning:
 * each row is one signature of an entry point, with the CUDA version that
 * introduced it (the vNNNNN of cudaTypedefs.h) and, where the driver has one,
 * its per-thread-default-stream (_ptsz / _ptds) variant. The newest row not
 * newer than the requested version wins, e.g. ("cuMemAlloc", 12000) is
 * cuMemAlloc_v2 and ("cuCtxSynchronize", 13000) is cuCtxSynchronize_v2.
 *
 * CHECKED() makes the compiler compare each function with the PFN typedef
 * of that version from cudaTypedefs.h: a row with the wrong version or
 * function does not build.
 *
 * The library is linked with -Bsymbolic-functions, so the pointers returned
 * here are the simulator's own even when a preloaded library interposes the
 * same names.
 */
#include "simcuda_internal.h"

#include <cudaTypedefs.h>
#include <string.h>

typedef void (*sim_fn)(void);

struct proc_entry {
    const char *name;
    int version;
    sim_fn fn;
    sim_fn fn_per_thread; /* NULL: the same function serves both flavours */
};

#define CHECKED(pfn, sym) ((sim_fn)(1 ? (sym) : (pfn)0))
#define ROW(name, ver, sym) {#name, ver, CHECKED(PFN_##name##_v##ver, sym), NULL}
/* ptver is the per-thread typedef's suffix, e.g. 7000_ptsz */
#define ROW_PT(name, ver, sym, ptver, ptsym)                                                                 \
    {#name, ver, CHECKED(PFN_##name##_v##ver, sym), CHECKED(PFN_##name##_v##ptver, ptsym)}

static const struct proc_entry table[] = {
    ROW(cuInit, 2000, cuInit),
    ROW(cuDriverGetVersion, 2020, cuDriverGetVersion),
    ROW(cuGetErrorName, 6000, cuGetErrorName),
    ROW(cuGetErrorString, 6000, cuGetErrorString),
    ROW(cuGetProcAddress, 11030, cuGetProcAddress),
    ROW(cuGetProcAddress, 12000, cuGetProcAddress_v2),
    ROW(cuGetExportTable, 3000, cuGetExportTable),

    ROW(cuDeviceGetCount, 2000, cuDeviceGetCount),
    ROW(cuDeviceGet, 2000, cuDeviceGet),
    ROW(cuDeviceGetName, 2000, cuDeviceGetName),
    ROW(cuDeviceGetUuid, 9020, cuDeviceGetUuid),
    ROW(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2),
    ROW(cuDeviceTotalMem, 2000, cuDeviceTotalMem),
    ROW(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
    ROW(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute),
    ROW(cuDeviceComputeCapability, 2000, cuDeviceComputeCapability),
    ROW(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId),
    ROW(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer),

    ROW(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
    ROW(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease),
    ROW(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
    ROW(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset),
    ROW(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2),
    ROW(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState),
    ROW(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags),
    ROW(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2),

    ROW(cuCtxCreate, 2000, cuCtxCreate),
    ROW(cuCtxCreate, 3020, cuCtxCreate_v2),
    ROW(cuCtxCreate, 11040, cuCtxCreate_v3),
    ROW(cuCtxCreate, 12050, cuCtxCreate_v4),
    ROW(cuCtxDestroy, 2000, cuCtxDestroy),
    ROW(cuCtxDestroy, 4000, cuCtxDestroy_v2),
    ROW(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
    ROW(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
    ROW(cuCtxPushCurrent, 2000, cuCtxPushCurrent),
    ROW(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2),
    ROW(cuCtxPopCurrent, 2000, cuCtxPopCurrent),
    ROW(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2),
    ROW(cuCtxSynchronize, 2000, cuCtxSynchronize),
    ROW(cuCtxSynchronize, 13000, cuCtxSynchronize_v2),
    ROW(cuCtxGetDevice, 2000, cuCtxGetDevice),
    ROW(cuCtxGetDevice, 13000, cuCtxGetDevice_v2),
    ROW(cuCtxGetFlags, 7000, cuCtxGetFlags),
    ROW(cuCtxGetId, 12000, cuCtxGetId),
    ROW(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion),
    ROW(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange),
    ROW(cuCtxSetLimit, 3010, cuCtxSetLimit),
    ROW(cuCtxGetLimit, 3010, cuCtxGetLimit),

    ROW(cuModuleLoad, 2000, cuModuleLoad),
    ROW(cuModuleLoadData, 2000, cuModuleLoadData),
    ROW(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx),
    ROW(cuModuleLoadFatBinary, 2000, cuModuleLoadFatBinary),
    ROW(cuModuleGetFunction, 2000, cuModuleGetFunction),
    ROW(cuModuleUnload, 2000, cuModuleUnload),
    ROW(cuModuleGetGlobal, 3020, cuModuleGetGlobal_v2),
    ROW(cuFuncGetAttribute, 2020, cuFuncGetAttribute),
    ROW(cuFuncSetAttribute, 9000, cuFuncSetAttribute),
    ROW(cuFuncSetCacheConfig, 3000, cuFuncSetCacheConfig),
    ROW(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, cuOccupancyMaxActiveBlocksPerMultiprocessor),

    ROW(cuMemAlloc, 2000, cuMemAlloc),
    ROW(cuMemAlloc, 3020, cuMemAlloc_v2),
    ROW(cuMemFree, 2000, cuMemFree),
    ROW(cuMemFree, 3020, cuMemFree_v2),
    ROW(cuMemGetInfo, 2000, cuMemGetInfo),
    ROW(cuMemGetInfo, 3020, cuMemGetInfo_v2),
    ROW(cuMemAllocHost, 2000, cuMemAllocHost),
    ROW(cuMemAllocHost, 3020, cuMemAllocHost_v2),
    ROW(cuMemHostAlloc, 2020, cuMemHostAlloc),
    ROW(cuMemFreeHost, 2000, cuMemFreeHost),
    ROW(cuMemAllocManaged, 6000, cuMemAllocManaged),
    ROW(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
    ROW(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2),
    ROW(cuMemHostRegister, 6050, cuMemHostRegister_v2),
    ROW(cuMemHostUnregister, 4000, cuMemHostUnregister),
    ROW(cuPointerGetAttribute, 4000, cuPointerGetAttribute),
    ROW_PT(cuMemAllocAsync, 11020, cuMemAllocAsync, 11020_ptsz, cuMemAllocAsync_ptsz),
    ROW_PT(cuMemFreeAsync, 11020, cuMemFreeAsync, 11020_ptsz, cuMemFreeAsync_ptsz),

    ROW(cuMemcpyHtoD, 2000, cuMemcpyHtoD),
    ROW_PT(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2, 7000_ptds, cuMemcpyHtoD_v2_ptds),
    ROW(cuMemcpyDtoH, 2000, cuMemcpyDtoH),
    ROW_PT(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2, 7000_ptds, cuMemcpyDtoH_v2_ptds),
    ROW(cuMemcpyDtoD, 2000, cuMemcpyDtoD),
    ROW_PT(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2, 7000_ptds, cuMemcpyDtoD_v2_ptds),
    ROW_PT(cuMemcpy, 4000, cuMemcpy, 7000_ptds, cuMemcpy_ptds),
    ROW(cuMemcpyHtoDAsync, 2000, cuMemcpyHtoDAsync),
    ROW_PT(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2, 7000_ptsz, cuMemcpyHtoDAsync_v2_ptsz),
    ROW(cuMemcpyDtoHAsync, 2000, cuMemcpyDtoHAsync),
    ROW_PT(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2, 7000_ptsz, cuMemcpyDtoHAsync_v2_ptsz),
    ROW(cuMemcpyDtoDAsync, 3000, cuMemcpyDtoDAsync),
    ROW_PT(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2, 7000_ptsz, cuMemcpyDtoDAsync_v2_ptsz),
    ROW_PT(cuMemcpyAsync, 4000, cuMemcpyAsync, 7000_ptsz, cuMemcpyAsync_ptsz),
    ROW(cuMemcpy2D, 3020, cuMemcpy2D_v2),
    ROW(cuMemcpy3D, 3020, cuMemcpy3D_v2),
    ROW(cuMemcpy2DAsync, 3020, cuMemcpy2DAsync_v2),
    ROW(cuMemcpy3DAsync, 3020, cuMemcpy3DAsync_v2),
    ROW(cuMemcpyPeer, 4000, cuMemcpyPeer),
    ROW(cuMemcpyPeerAsync, 4000, cuMemcpyPeerAsync),
    ROW(cuMemsetD8, 2000, cuMemsetD8),
    ROW_PT(cuMemsetD8, 3020, cuMemsetD8_v2, 7000_ptds, cuMemsetD8_v2_ptds),
    ROW(cuMemsetD16, 2000, cuMemsetD16),
    ROW_PT(cuMemsetD16, 3020, cuMemsetD16_v2, 7000_ptds, cuMemsetD16_v2_ptds),
    ROW(cuMemsetD32, 2000, cuMemsetD32),
    ROW_PT(cuMemsetD32, 3020, cuMemsetD32_v2, 7000_ptds, cuMemsetD32_v2_ptds),
    ROW_PT(cuMemsetD8Async, 3020, cuMemsetD8Async, 7000_ptsz, cuMemsetD8Async_ptsz),
    ROW_PT(cuMemsetD16Async, 3020, cuMemsetD16Async, 7000_ptsz, cuMemsetD16Async_ptsz),
    ROW_PT(cuMemsetD32Async, 3020, cuMemsetD32Async, 7000_ptsz, cuMemsetD32Async_ptsz),

    ROW_PT(cuLaunchKernel, 4000, cuLaunchKernel, 7000_ptsz, cuLaunchKernel_ptsz),
    ROW_PT(cuLaunchKernelEx, 11060, cuLaunchKernelEx, 11060_ptsz, cuLaunchKernelEx_ptsz),
    ROW_PT(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel, 9000_ptsz, cuLaunchCooperativeKernel_ptsz),
    ROW_PT(cuLaunchHostFunc, 10000, cuLaunchHostFunc, 10000_ptsz, cuLaunchHostFunc_ptsz),
    ROW_PT(cuStreamAddCallback, 5000, cuStreamAddCallback, 7000_ptsz, cuStreamAddCallback_ptsz),
    ROW_PT(cuGraphLaunch, 10000, cuGraphLaunch, 10000_ptsz, cuGraphLaunch_ptsz),

    ROW(cuStreamCreate, 2000, cuStreamCreate),
    ROW(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority),
    ROW(cuStreamDestroy, 2000, cuStreamDestroy),
    ROW(cuStreamDestroy, 4000, cuStreamDestroy_v2),
    ROW_PT(cuStreamSynchronize, 2000, cuStreamSynchronize, 7000_ptsz, cuStreamSynchronize_ptsz),
    ROW_PT(cuStreamQuery, 2000, cuStreamQuery, 7000_ptsz, cuStreamQuery_ptsz),
    ROW_PT(cuStreamWaitEvent, 3020, cuStreamWaitEvent, 7000_ptsz, cuStreamWaitEvent_ptsz),
    ROW(cuStreamGetPriority, 5050, cuStreamGetPriority),
    ROW(cuStreamGetFlags, 5050, cuStreamGetFlags),
    ROW(cuStreamGetId, 12000, cuStreamGetId),
    ROW(cuStreamGetCtx, 9020, cuStreamGetCtx),
    ROW(cuStreamGetCtx, 12050, cuStreamGetCtx_v2),
    ROW(cuThreadExchangeStreamCaptureMode, 10010, cuThreadExchangeStreamCaptureMode),
    ROW_PT(cuStreamIsCapturing, 10000, cuStreamIsCapturing, 10000_ptsz, cuStreamIsCapturing_ptsz),
    ROW_PT(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2, 10010_ptsz, cuStreamBeginCapture_v2_ptsz),
    ROW_PT(cuStreamEndCapture, 10000, cuStreamEndCapture, 10000_ptsz, cuStreamEndCapture_ptsz),

    ROW(cuEventCreate, 2000, cuEventCreate),
    ROW_PT(cuEventRecord, 2000, cuEventRecord, 7000_ptsz, cuEventRecord_ptsz),
    ROW_PT(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags, 11010_ptsz, cuEventRecordWithFlags_ptsz),
    ROW(cuEventQuery, 2000, cuEventQuery),
    ROW(cuEventSynchronize, 2000, cuEventSynchronize),
    ROW(cuEventElapsedTime, 2000, cuEventElapsedTime),
    ROW(cuEventElapsedTime, 12080, cuEventElapsedTime_v2),
    ROW(cuEventDestroy, 2000, cuEventDestroy),
    ROW(cuEventDestroy, 4000, cuEventDestroy_v2),

    ROW(cuCheckpointProcessLock, 12080, cuCheckpointProcessLock),
    ROW(cuCheckpointProcessUnlock, 12080, cuCheckpointProcessUnlock),
    ROW(cuCheckpointProcessGetState, 12080, cuCheckpointProcessGetState),
    ROW(cuCheckpointProcessGetRestoreThreadId, 12080, cuCheckpointProcessGetRestoreThreadId),
    ROW(cuCheckpointProcessCheckpoint, 12080, cuCheckpointProcessCheckpoint),
    ROW(cuCheckpointProcessRestore, 12080, cuCheckpointProcessRestore),
};

static CUresult lookup(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    CUdriverProcAddressQueryResult ignored;
    if (!status)
        status = &ignored;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const struct proc_entry *best = NULL;
    bool known = false;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) != 0)
            continue;
        known = true;
        if (table[i].version <= cuda_version && (!best || table[i].version > best->version))
            best = &table[i];
    }
    if (!best) {
        *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    /* DEFAULT (0) means the legacy default stream at the driver level. */
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    sim_fn fn = per_thread && best->fn_per_thread ? best->fn_per_thread : best->fn;
    *pfn = (void *)fn;
    *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
