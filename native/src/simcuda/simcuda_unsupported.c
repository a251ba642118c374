/*
 * Entry points the simulator exports but does not implement. They exist so
 * that callers that look them up (dlsym, cuGetProcAddress) or link against
 * them get a clean CUDA_ERROR_NOT_SUPPORTED instead of a missing symbol.
 * Each prototype is checked against cuda.h by the compiler.
 *
 * The legacy (pre-3.2) memory entry points take 32-bit device pointers,
 * which cannot hold the simulator's host addresses.
 */
#include "simcuda_internal.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

#define UNSUPPORTED { return CUDA_ERROR_NOT_SUPPORTED; }

/* 32-bit device pointer era */
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) UNSUPPORTED
CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr) UNSUPPORTED
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount) UNSUPPORTED
CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount) UNSUPPORTED
CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount) UNSUPPORTED
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount,
                                   CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                                   CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                                   CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N) UNSUPPORTED
CUresult CUDAAPI cuMemsetD16(CUdeviceptr_v1 dstDevice, unsigned short us, unsigned int N) UNSUPPORTED
CUresult CUDAAPI cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N) UNSUPPORTED

/* graphs and stream capture */
CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) UNSUPPORTED
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) UNSUPPORTED
CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) UNSUPPORTED
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) UNSUPPORTED

/* memory beyond plain allocations and 1-D copies */
CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) UNSUPPORTED
CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                    unsigned int ElementSizeBytes) UNSUPPORTED
CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) UNSUPPORTED
CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags) UNSUPPORTED
CUresult CUDAAPI cuMemHostUnregister(void *p) UNSUPPORTED
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) UNSUPPORTED
CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy) UNSUPPORTED
CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy) UNSUPPORTED
CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                              CUcontext srcContext, size_t ByteCount) UNSUPPORTED
CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                   CUcontext srcContext, size_t ByteCount, CUstream hStream) UNSUPPORTED
CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name) UNSUPPORTED

/* function attributes, limits, occupancy, peers */
CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) UNSUPPORTED
CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) UNSUPPORTED
CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) UNSUPPORTED
CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) UNSUPPORTED
CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit) UNSUPPORTED
CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                              size_t dynamicSMemSize) UNSUPPORTED
CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) UNSUPPORTED
