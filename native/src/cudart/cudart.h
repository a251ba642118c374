/*
 * Forwarded mode's CUDA runtime: a libcudart.so.N that implements the common
 * runtime API on top of driver calls. In forwarded mode it comes first on the
 * command's library path together with the forwarding client (libcuda.so.1),
 * so a program linked with the shared CUDA runtime (nvcc -cudart shared) runs
 * forwarded: the real libcudart cannot, it needs the driver's private tables
 * (cuGetExportTable) and context-independent loading (cuLibrary*), which do
 * not cross a process boundary. Its driver calls are plain symbol references
 * to libcuda.so.1, so they pass the interception library (gate, timing
 * checks) and reach whichever driver the command loads: the forwarding
 * client, or the simulated driver when it runs in process mode.
 * Files:
 *   cudart_state.c    errors (last error, names, calls it does not have),
 *                     the current device and its primary context
 *   cudart_device.c   devices, versions, synchronisation, reset
 *   cudart_memory.c   allocations, copies, memsets, symbols
 *   cudart_stream.c   streams and events
 *   cudart_graph.c    stream capture and graphs
 *   cudart_launch.c   nvcc's registration of fatbinaries and kernels, launches
 *   (generated)       cudart_errors.inc (driver_types.h's cudaError enum) and a
 *                     stub for every other entry point of cuda_runtime_api.h
 */
#ifndef KREX_CUDART_H
#define KREX_CUDART_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

#define CUDART_EXPORT __attribute__((visibility("default")))
#define CUDART_MAX_DEVICES 16

/* ---- cudart_state.c ------------------------------------------------------------ */

/* Records a driver result as the calling thread's last error and returns it
 * as the runtime's error (the two enums share their values; a driver code the
 * runtime does not define becomes cudaErrorUnknown). */
cudaError_t cudart_result(CUresult rc);
/* The same for an error the runtime itself finds. */
cudaError_t cudart_fail(cudaError_t err);
/* A runtime entry point this library does not implement: one line on stderr
 * naming it; under forwarded mode the forwarding client records it for the
 * runtime (and ends the command when the command may fall back to process
 * mode). Returns cudaErrorNotSupported. */
cudaError_t cudart_unknown(const char *name);
int cudart_stub(const char *name); /* the same, for the generated stubs */
/* The calling thread's device, its primary context current on the thread
 * (retained at the first use, as the runtime's lazy initialisation does). */
cudaError_t cudart_context(int *device);
/* The current device without initialising anything. */
int cudart_device(void);
void cudart_set_device(int device);
int cudart_device_count(void); /* initialises the driver; 0 when it cannot */
/* cudaDeviceReset: releases the device's primary context (retained again at
 * the next call). */
void cudart_release_context(int device);

/* ---- cudart_memory.c ------------------------------------------------------------ */

/* Frees what cudaMalloc gave on the device (cudaDeviceReset). */
void cudart_free_device_memory(int device);

/* ---- cudart_launch.c ------------------------------------------------------------ */

/* Unloads every registered module's copy on the device (cudaDeviceReset). */
void cudart_unload_modules(int device);
/* The device pointer and size of a registered variable (by its host shadow). */
cudaError_t cudart_symbol(const void *symbol, CUdeviceptr *dptr, size_t *size);

/* ---- nvcc's host code (crt/host_runtime.h, crt/device_functions.h) -----------------
 * These entry points are declared by the toolkit only for C++ compiled by nvcc;
 * here with the same ABI. */
CUDART_EXPORT void **__cudaRegisterFatBinary(void *fatCubin);
CUDART_EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
CUDART_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle);
CUDART_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                          const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                          dim3 *bDim, dim3 *gDim, int *wSize);
CUDART_EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                     const char *deviceName, int ext, size_t size, int constant, int global);
CUDART_EXPORT void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
                                            const char *deviceName, int ext, size_t size, int constant,
                                            int global);
CUDART_EXPORT char __cudaInitModule(void **fatCubinHandle);
CUDART_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                   struct CUstream_st *stream);
CUDART_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                     void *stream);
CUDART_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
CUDART_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                             size_t sharedMem, cudaStream_t stream);
CUDART_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                                  size_t sharedMem, cudaStream_t stream);

/* The per-thread default stream of a _ptsz/_ptds entry point: its stream 0. */
static inline cudaStream_t cudart_per_thread(cudaStream_t s)
{
    return s == NULL ? cudaStreamPerThread : s;
}

#endif /* KREX_CUDART_H */
