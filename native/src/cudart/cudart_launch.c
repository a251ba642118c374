/*
 * nvcc's registration of device code, and kernel launches.
 *
 * A program built by nvcc registers, before main, each translation unit's
 * fatbinary (__cudaRegisterFatBinary with its __fatBinC_Wrapper_t), then each
 * kernel (__cudaRegisterFunction: the host stub's address and the kernel's
 * device name) and variable (__cudaRegisterVar). Nothing is loaded then: a
 * module is loaded on a device at the first use of one of its kernels or
 * variables there (cuModuleLoadData with the wrapper: the forwarding client
 * reads the fatbinary's size from its header and sends its bytes), and a
 * kernel's function is looked up by its device name once per device.
 *
 * A launch <<<grid, block, shmem, stream>>> is, in nvcc's host code,
 * __cudaPushCallConfiguration followed by a call of the host stub, which pops
 * the configuration and calls cudaLaunchKernel(stub, ...) (CUDA 12) or, since
 * CUDA 13, __cudaGetKernel(&handle, stub) once and __cudaLaunchKernel(handle,
 * ...). The handle is the kernel's record here. The arguments are an array of
 * pointers: cuLaunchKernel takes them as they are (the forwarding client asks
 * the server for their sizes once per function).
 */
#include "cudart.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FATBIN_WRAPPER_MAGIC 0x466243b1u /* __fatBinC_Wrapper_t, crt/host_runtime.h's __fatDeviceText */

struct fatbin_wrapper {
    int magic;
    int version;
    const void *data;
    void *filename_or_fatbins;
};

/* One registered fatbinary. `handle` comes first: its address is the
 * void ** that nvcc's code keeps and passes back. */
struct module {
    void *handle;
    const void *image; /* what __cudaRegisterFatBinary got */
    CUmodule loaded[CUDART_MAX_DEVICES];
    struct module *next;
};

struct kernel {
    const void *host_fun;
    char *device_name;
    struct module *module;
    CUfunction function[CUDART_MAX_DEVICES];
    struct kernel *next;       /* all kernels */
    struct kernel *next_hash;  /* same bucket */
};

struct variable {
    const void *host_var;
    char *device_name;
    struct module *module;
    size_t size;
    CUdeviceptr dptr[CUDART_MAX_DEVICES];
    struct variable *next;
};

#define BUCKETS 256u
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module *modules;
static struct kernel *kernels;
static struct kernel *by_host_fun[BUCKETS];
static struct variable *variables;

static unsigned bucket(const void *p)
{
    uintptr_t x = (uintptr_t)p;
    return (unsigned)((x >> 4) ^ (x >> 12)) & (BUCKETS - 1);
}

/* ---- registration ---------------------------------------------------------------- */

CUDART_EXPORT void **__cudaRegisterFatBinary(void *fatCubin)
{
    struct module *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->handle = m;
    m->image = fatCubin;
    pthread_mutex_lock(&reg_lock);
    m->next = modules;
    modules = m;
    pthread_mutex_unlock(&reg_lock);
    return &m->handle;
}

CUDART_EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    (void)fatCubinHandle; /* loading waits for the first use */
}

static struct module *module_of(void **handle)
{
    return handle != NULL ? (struct module *)*handle : NULL;
}

CUDART_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                          const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                          dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)deviceFun;
    (void)thread_limit;
    (void)tid;
    (void)bid;
    (void)bDim;
    (void)gDim;
    (void)wSize;
    struct module *m = module_of(fatCubinHandle);
    struct kernel *k = calloc(1, sizeof *k);
    if (m == NULL || k == NULL || deviceName == NULL || (k->device_name = strdup(deviceName)) == NULL) {
        free(k);
        return; /* a launch of it then fails as an invalid device function */
    }
    k->host_fun = hostFun;
    k->module = m;
    unsigned b = bucket(hostFun);
    pthread_mutex_lock(&reg_lock);
    k->next = kernels;
    kernels = k;
    k->next_hash = by_host_fun[b];
    by_host_fun[b] = k;
    pthread_mutex_unlock(&reg_lock);
}

CUDART_EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                     const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)deviceAddress;
    (void)ext;
    (void)constant;
    (void)global;
    struct module *m = module_of(fatCubinHandle);
    struct variable *v = calloc(1, sizeof *v);
    if (m == NULL || v == NULL || deviceName == NULL || (v->device_name = strdup(deviceName)) == NULL) {
        free(v);
        return;
    }
    v->host_var = hostVar;
    v->module = m;
    v->size = size;
    pthread_mutex_lock(&reg_lock);
    v->next = variables;
    variables = v;
    pthread_mutex_unlock(&reg_lock);
}

/* Managed variables live in memory the GPU and the program share: not in
 * forwarded mode. Registered before main, so a fallback happens at once. */
CUDART_EXPORT void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
                                            const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)fatCubinHandle;
    (void)hostVarPtrAddress;
    (void)deviceAddress;
    (void)deviceName;
    (void)ext;
    (void)size;
    (void)constant;
    (void)global;
    cudart_unknown("__cudaRegisterManagedVar (a __managed__ variable)");
}

/* Called by nvcc's code for modules with managed variables: the module is
 * there (nothing to initialise without them). */
CUDART_EXPORT char __cudaInitModule(void **fatCubinHandle)
{
    return module_of(fatCubinHandle) != NULL;
}

CUDART_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    /* At exit: the driver (or the server, for a forwarded command) drops the
     * modules with the context; the records stay, a late launch from another
     * destructor still finds its kernel. */
    (void)fatCubinHandle;
}

/* ---- loading ----------------------------------------------------------------------- */

static CUresult load_module(struct module *m, int dev)
{
    /* Called under reg_lock. */
    if (m->loaded[dev] != NULL)
        return CUDA_SUCCESS;
    const struct fatbin_wrapper *w = m->image;
    if (w == NULL)
        return CUDA_ERROR_INVALID_IMAGE;
    /* The driver gets the fatbinary itself (its header says its size, which
     * the forwarding client needs to send its bytes); anything else as given. */
    const void *image = (unsigned)w->magic == FATBIN_WRAPPER_MAGIC ? w->data : m->image;
    return cuModuleLoadData(&m->loaded[dev], image);
}

static cudaError_t function_of(struct kernel *k, CUfunction *out)
{
    int dev;
    cudaError_t err = cudart_context(&dev);
    if (err != cudaSuccess)
        return err;
    CUfunction f = __atomic_load_n(&k->function[dev], __ATOMIC_ACQUIRE);
    if (f != NULL) {
        *out = f;
        return cudaSuccess;
    }
    pthread_mutex_lock(&reg_lock);
    CUresult rc = load_module(k->module, dev);
    if (rc == CUDA_SUCCESS && k->function[dev] == NULL) {
        rc = cuModuleGetFunction(&f, k->module->loaded[dev], k->device_name);
        if (rc == CUDA_SUCCESS)
            __atomic_store_n(&k->function[dev], f, __ATOMIC_RELEASE);
    }
    f = k->function[dev];
    pthread_mutex_unlock(&reg_lock);
    if (rc != CUDA_SUCCESS)
        return rc == CUDA_ERROR_NOT_FOUND ? cudart_fail(cudaErrorInvalidDeviceFunction) : cudart_result(rc);
    *out = f;
    return cudaSuccess;
}

static struct kernel *kernel_of(const void *host_fun)
{
    pthread_mutex_lock(&reg_lock);
    struct kernel *k = by_host_fun[bucket(host_fun)];
    while (k != NULL && k->host_fun != host_fun)
        k = k->next_hash;
    pthread_mutex_unlock(&reg_lock);
    return k;
}

/* The driver function of a registered kernel's host stub, in the current device's context. */
static cudaError_t function_of_host(const void *func, CUfunction *out)
{
    struct kernel *k = kernel_of(func);
    if (k == NULL)
        return cudart_fail(cudaErrorInvalidDeviceFunction);
    return function_of(k, out);
}

cudaError_t cudart_symbol(const void *symbol, CUdeviceptr *dptr, size_t *size)
{
    int dev;
    cudaError_t err = cudart_context(&dev);
    if (err != cudaSuccess)
        return err;
    pthread_mutex_lock(&reg_lock);
    struct variable *v = variables;
    while (v != NULL && v->host_var != symbol)
        v = v->next;
    CUresult rc = v == NULL ? CUDA_ERROR_NOT_FOUND : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS && v->dptr[dev] == 0) {
        rc = load_module(v->module, dev);
        if (rc == CUDA_SUCCESS)
            rc = cuModuleGetGlobal(&v->dptr[dev], NULL, v->module->loaded[dev], v->device_name);
    }
    if (rc == CUDA_SUCCESS) {
        *dptr = v->dptr[dev];
        if (size != NULL)
            *size = v->size;
    }
    pthread_mutex_unlock(&reg_lock);
    if (v == NULL)
        return cudart_fail(cudaErrorInvalidSymbol);
    return cudart_result(rc);
}

void cudart_unload_modules(int device)
{
    pthread_mutex_lock(&reg_lock);
    for (struct kernel *k = kernels; k != NULL; k = k->next)
        __atomic_store_n(&k->function[device], NULL, __ATOMIC_RELEASE);
    for (struct variable *v = variables; v != NULL; v = v->next)
        v->dptr[device] = 0;
    for (struct module *m = modules; m != NULL; m = m->next) {
        if (m->loaded[device] != NULL)
            cuModuleUnload(m->loaded[device]);
        m->loaded[device] = NULL;
    }
    pthread_mutex_unlock(&reg_lock);
}

/* ---- launches ----------------------------------------------------------------------- */

struct call_config {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
};

/* <<<>>> pushes, the stub pops right away; a stack allows a launch inside an
 * argument's evaluation. */
#define CONFIG_DEPTH 8
static __thread struct call_config configs[CONFIG_DEPTH];
static __thread unsigned config_depth;

CUDART_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                   struct CUstream_st *stream)
{
    if (config_depth == CONFIG_DEPTH)
        return 1; /* nvcc's code then skips the launch */
    configs[config_depth++] = (struct call_config){gridDim, blockDim, sharedMem, (cudaStream_t)stream};
    return 0;
}

CUDART_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                     void *stream)
{
    if (config_depth == 0)
        return cudart_fail(cudaErrorMissingConfiguration);
    struct call_config c = configs[--config_depth];
    *gridDim = c.grid;
    *blockDim = c.block;
    *sharedMem = c.shmem;
    memcpy(stream, &c.stream, sizeof c.stream);
    return cudaSuccess;
}

static cudaError_t launch(struct kernel *k, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t stream)
{
    if (k == NULL)
        return cudart_fail(cudaErrorInvalidDeviceFunction);
    CUfunction f;
    cudaError_t err = function_of(k, &f);
    if (err != cudaSuccess)
        return err;
    return cudart_result(cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem,
                                        (CUstream)stream, args, NULL));
}

CUDART_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                           size_t sharedMem, cudaStream_t stream)
{
    return launch(kernel_of(func), gridDim, blockDim, args, sharedMem, stream);
}

CUDART_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                                size_t sharedMem, cudaStream_t stream)
{
    return launch(kernel_of(func), gridDim, blockDim, args, sharedMem, cudart_per_thread(stream));
}

CUDART_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
    if (kernel == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    struct kernel *k = kernel_of(hostFun);
    *kernel = (cudaKernel_t)(void *)k;
    return k != NULL ? cudaSuccess : cudart_fail(cudaErrorInvalidDeviceFunction);
}

CUDART_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                             size_t sharedMem, cudaStream_t stream)
{
    return launch((struct kernel *)(void *)kernel, gridDim, blockDim, args, sharedMem, stream);
}

CUDART_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                                  size_t sharedMem, cudaStream_t stream)
{
    return launch((struct kernel *)(void *)kernel, gridDim, blockDim, args, sharedMem, cudart_per_thread(stream));
}

/* ---- kernel attributes ----------------------------------------------------------------- */

CUDART_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    CUfunction f;
    cudaError_t err = function_of_host(func, &f);
    if (err != cudaSuccess)
        return err;
    /* cudaFuncAttributeMaxDynamicSharedMemorySize (8) and
     * cudaFuncAttributePreferredSharedMemoryCarveout (9) are the driver's numbers. */
    return cudart_result(cuFuncSetAttribute(f, (CUfunction_attribute)attr, value));
}

/* Occupancy: the driver's calculator for the kernel's function on the
 * current device (cuda_runtime.h's cudaOccupancyMaxPotentialBlockSize
 * templates are built on these and cudaFuncGetAttributes). */
CUDART_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func,
                                                                                 int blockSize,
                                                                                 size_t dynamicSMemSize,
                                                                                 unsigned int flags)
{
    CUfunction f;
    cudaError_t err = function_of_host(func, &f);
    if (err != cudaSuccess)
        return err;
    /* cudaOccupancyDisableCachingOverride (1) is CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE. */
    return cudart_result(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, f, blockSize,
                                                                             dynamicSMemSize, flags));
}

CUDART_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                                        int blockSize, size_t dynamicSMemSize)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

CUDART_EXPORT cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, const void *func,
                                                                    int numBlocks, int blockSize)
{
    CUfunction f;
    cudaError_t err = function_of_host(func, &f);
    if (err != cudaSuccess)
        return err;
    return cudart_result(cuOccupancyAvailableDynamicSMemPerBlock(dynamicSmemSize, f, numBlocks, blockSize));
}

CUDART_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    if (attr == NULL)
        return cudart_fail(cudaErrorInvalidValue);
    CUfunction f;
    cudaError_t err = function_of_host(func, &f);
    if (err != cudaSuccess)
        return err;
    memset(attr, 0, sizeof *attr);
    int v = 0;
#define GET(a, field)                                                                                       \
    if (cuFuncGetAttribute(&v, a, f) == CUDA_SUCCESS)                                                        \
        attr->field = v;
    GET(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, sharedSizeBytes)
    GET(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, constSizeBytes)
    GET(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, localSizeBytes)
    GET(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, maxThreadsPerBlock)
    GET(CU_FUNC_ATTRIBUTE_NUM_REGS, numRegs)
    GET(CU_FUNC_ATTRIBUTE_PTX_VERSION, ptxVersion)
    GET(CU_FUNC_ATTRIBUTE_BINARY_VERSION, binaryVersion)
    GET(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, maxDynamicSharedSizeBytes)
    GET(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, preferredShmemCarveout)
#undef GET
    return cudaSuccess;
}
