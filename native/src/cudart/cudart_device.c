/*
 * Devices, versions, synchronisation and reset.
 *
 * cudaGetDeviceProperties fills the fields a benchmark reads (name, memory,
 * compute capability, limits, counts) from driver attributes, each asked once
 * per device and kept; the rest are zero.
 */
#include "cudart.h"

#include <pthread.h>
#include <string.h>

CUDART_EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
    if (count == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    *count = cudart_device_count();
    return *count > 0 ? cudaSuccess : cudart_fail(cudaErrorNoDevice);
}

CUDART_EXPORT cudaError_t cudaSetDevice(int device)
{
    int n = cudart_device_count();
    if (n == 0)
        return cudart_fail(cudaErrorNoDevice);
    if (device < 0 || device >= n)
        return cudart_fail(cudaErrorInvalidDevice);
    cudart_set_device(device);
    /* Since CUDA 12 cudaSetDevice initialises the device's context. */
    return cudart_context(NULL);
}

CUDART_EXPORT cudaError_t cudaGetDevice(int *device)
{
    if (device == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    *device = cudart_device();
    return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags)
{
    (void)deviceFlags;
    (void)flags;
    int keep = cudart_device();
    cudart_set_device(device);
    cudaError_t err = cudart_context(NULL);
    cudart_set_device(keep);
    return err;
}

CUDART_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
    (void)flags; /* scheduling flags belong to the context's owner (the server in forwarded mode) */
    return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t err = cudart_context(NULL);
    return err != cudaSuccess ? err : cudart_result(cuCtxSynchronize());
}

/* What the runtime's reset does, for what this library made: the device's
 * memory from cudaMalloc, its modules and the primary context's retain. The
 * context itself stays (in forwarded mode it is the server's); streams and
 * events a program did not destroy go with it at the command's end. */
CUDART_EXPORT cudaError_t cudaDeviceReset(void)
{
    int dev = cudart_device();
    if (cudart_device_count() == 0)
        return cudaSuccess;
    cudaError_t err = cudart_context(NULL);
    if (err != cudaSuccess)
        return err;
    cuCtxSynchronize();
    cudart_free_device_memory(dev);
    cudart_unload_modules(dev);
    cudart_release_context(dev);
    return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    if (cudart_device_count() == 0) {
        *driverVersion = 0;
        return cudaSuccess;
    }
    return cudart_result(cuDriverGetVersion(driverVersion));
}

CUDART_EXPORT cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (runtimeVersion == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (value == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    int n = cudart_device_count();
    if (device < 0 || device >= n)
        return cudart_fail(n == 0 ? cudaErrorNoDevice : cudaErrorInvalidDevice);
    /* cudaDeviceAttr numbers are the driver's CUdevice_attribute numbers. */
    return cudart_result(cuDeviceGetAttribute(value, (CUdevice_attribute)attr, (CUdevice)device));
}

static pthread_mutex_t props_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cudaDeviceProp props[CUDART_MAX_DEVICES];
static bool props_known[CUDART_MAX_DEVICES];

struct int_field {
    CUdevice_attribute attr;
    size_t offset;
    bool size_t_field;
};

#define INT_FIELD(a, f) {a, offsetof(struct cudaDeviceProp, f), false}
#define SIZE_FIELD(a, f) {a, offsetof(struct cudaDeviceProp, f), true}

static const struct int_field fields[] = {
    SIZE_FIELD(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, sharedMemPerBlock),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, regsPerBlock),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_WARP_SIZE, warpSize),
    SIZE_FIELD(CU_DEVICE_ATTRIBUTE_MAX_PITCH, memPitch),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, maxThreadsPerBlock),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, maxThreadsDim[0]),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, maxThreadsDim[1]),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, maxThreadsDim[2]),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, maxGridSize[0]),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, maxGridSize[1]),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, maxGridSize[2]),
    SIZE_FIELD(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, totalConstMem),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, major),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, minor),
    SIZE_FIELD(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, textureAlignment),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, multiProcessorCount),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_INTEGRATED, integrated),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, canMapHostMemory),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, concurrentKernels),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_ECC_ENABLED, ECCEnabled),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, pciBusID),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, pciDeviceID),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, pciDomainID),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, asyncEngineCount),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, unifiedAddressing),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, memoryBusWidth),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, l2CacheSize),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, maxThreadsPerMultiProcessor),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, streamPrioritiesSupported),
    SIZE_FIELD(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, sharedMemPerMultiprocessor),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, regsPerMultiprocessor),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, managedMemory),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, cooperativeLaunch),
    SIZE_FIELD(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, sharedMemPerBlockOptin),
    INT_FIELD(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, maxBlocksPerMultiProcessor),
    SIZE_FIELD(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, reservedSharedMemPerBlock),
};

/* Attributes a driver does not have (the simulator answers few) stay zero. */
static CUresult fill_props(struct cudaDeviceProp *p, CUdevice dev)
{
    memset(p, 0, sizeof *p);
    CUresult rc = cuDeviceGetName(p->name, sizeof p->name, dev);
    if (rc == CUDA_SUCCESS)
        rc = cuDeviceTotalMem(&p->totalGlobalMem, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    CUuuid uuid;
    if (cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS)
        memcpy(&p->uuid, &uuid, sizeof p->uuid);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        int v = 0;
        if (cuDeviceGetAttribute(&v, fields[i].attr, dev) != CUDA_SUCCESS)
            continue;
        char *at = (char *)p + fields[i].offset;
        if (fields[i].size_t_field) {
            size_t s = (size_t)(unsigned)v;
            memcpy(at, &s, sizeof s);
        } else {
            memcpy(at, &v, sizeof v);
        }
    }
    return CUDA_SUCCESS;
}

CUDART_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (prop == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    int n = cudart_device_count();
    if (device < 0 || device >= n)
        return cudart_fail(n == 0 ? cudaErrorNoDevice : cudaErrorInvalidDevice);
    pthread_mutex_lock(&props_lock);
    CUresult rc = CUDA_SUCCESS;
    if (!props_known[device]) {
        rc = fill_props(&props[device], (CUdevice)device);
        props_known[device] = rc == CUDA_SUCCESS;
    }
    if (rc == CUDA_SUCCESS)
        *prop = props[device];
    pthread_mutex_unlock(&props_lock);
    return cudart_result(rc);
}

CUDART_EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    cudaError_t err = cudart_context(NULL);
    return err != cudaSuccess ? err : cudart_result(cuMemGetInfo(free_bytes, total));
}

/* Driver entry points: the driver's cuGetProcAddress (in forwarded mode the
 * client's, which hands out its own entry points). */
static cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned int version, unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *status)
{
    if (cudart_device_count() == 0)
        return cudart_fail(cudaErrorNoDevice);
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    /* cudaEnableDefault, cudaEnableLegacyStream and cudaEnablePerThreadDefaultStream
     * are the driver's flags' values. */
    CUresult rc = cuGetProcAddress(symbol, funcPtr, (int)version, (cuuint64_t)flags, &st);
    if (status != NULL)
        *status = (enum cudaDriverEntryPointQueryResult)st;
    return cudart_result(rc);
}

CUDART_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                                           unsigned int cudaVersion, unsigned long long flags,
                                                           enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

CUDART_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
                                                                unsigned int cudaVersion, unsigned long long flags,
                                                                enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, cudaVersion, flags | cudaEnablePerThreadDefaultStream, driverStatus);
}

CUDART_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

CUDART_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                                       enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, CUDART_VERSION, flags | cudaEnablePerThreadDefaultStream, driverStatus);
}

/* Profiling ranges belong to a profiler attached to the process that owns the
 * context (the server, in forwarded mode): nothing to start or stop here.
 * (Declared here: cuda_profiler_api.h is a toolkit component of its own.) */
CUDART_EXPORT cudaError_t cudaProfilerStart(void);
CUDART_EXPORT cudaError_t cudaProfilerStop(void);

CUDART_EXPORT cudaError_t cudaProfilerStart(void)
{
    return cudaSuccess;
}

CUDART_EXPORT cudaError_t cudaProfilerStop(void)
{
    return cudaSuccess;
}
