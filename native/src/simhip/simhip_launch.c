/*
 * Modules, kernel launches and host functions of the simulated HIP runtime.
 *
 * Module kernels (hipModuleLoad*, hipModuleGetFunction) are the simulated
 * driver's: any image is a module, any name a kernel. A kernel launched by
 * its host address (hipLaunchKernel, hipExtLaunchKernel: what hipcc's
 * triple-chevron launches become) is a function of a per-device module of
 * this runtime, named after its symbol (dladdr), one per address.
 * Arguments follow the simulated driver's convention (include/krex_simcuda.h);
 * HIP's packed `extra` form (HIP_LAUNCH_PARAM_*) is read into it.
 */
#include "simhip_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

SIMHIP_EXPORT hipError_t hipModuleLoad(hipModule_t *module, const char *fname)
{
    READY();
    return simhip_result(cuModuleLoad((CUmodule *)module, fname));
}

SIMHIP_EXPORT hipError_t hipModuleLoadData(hipModule_t *module, const void *image)
{
    READY();
    return simhip_result(cuModuleLoadData((CUmodule *)module, image));
}

SIMHIP_EXPORT hipError_t hipModuleLoadDataEx(hipModule_t *module, const void *image, unsigned int numOptions,
                                             hipJitOption *options, void **optionValues)
{
    (void)numOptions;
    (void)options;
    (void)optionValues;
    return hipModuleLoadData(module, image);
}

SIMHIP_EXPORT hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module, const char *kname)
{
    READY();
    return simhip_result(cuModuleGetFunction((CUfunction *)function, (CUmodule)module, kname));
}

SIMHIP_EXPORT hipError_t hipModuleUnload(hipModule_t module)
{
    READY();
    return simhip_result(cuModuleUnload((CUmodule)module));
}

/* HIP's `extra` (HIP_LAUNCH_PARAM_BUFFER_POINTER, _SIZE, _END) as the two
 * simulated arguments; params[] must hold two slots. */
static hipError_t from_extra(void **extra, void **params, uint64_t values[2])
{
    const unsigned char *buf = NULL;
    size_t size = 0;
    for (size_t i = 0; extra[i] != HIP_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != NULL)
            memcpy(&size, extra[i + 1], sizeof size);
        else
            return simhip_fail(hipErrorInvalidValue);
    }
    values[0] = values[1] = 0;
    if (buf != NULL && size >= 8)
        memcpy(&values[0], buf, 8);
    if (buf != NULL && size >= 16)
        memcpy(&values[1], buf + 8, 8);
    params[0] = &values[0];
    params[1] = &values[1];
    return hipSuccess;
}

static hipError_t launch(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, hipStream_t stream, void **kernelParams, void **extra)
{
    READY();
    void *params[2];
    uint64_t values[2];
    if (kernelParams == NULL && extra != NULL) {
        hipError_t e = from_extra(extra, params, values);
        if (e != hipSuccess)
            return e;
        kernelParams = params;
    }
    return simhip_result(cuLaunchKernel((CUfunction)f, gx, gy, gz, bx, by, bz, 0, (CUstream)stream, kernelParams, NULL));
}

SIMHIP_EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
                                               unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ, unsigned int sharedMemBytes,
                                               hipStream_t stream, void **kernelParams, void **extra)
{
    (void)sharedMemBytes;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream, kernelParams, extra);
}

/* Events around an extended launch: recorded before and after it on its stream. */
static hipError_t launch_between(hipEvent_t start, hipEvent_t stop, hipStream_t stream, hipError_t (*go)(void *),
                                 void *arg)
{
    hipError_t e = start != NULL ? simhip_result(cuEventRecord((CUevent)start, (CUstream)stream)) : hipSuccess;
    if (e == hipSuccess)
        e = go(arg);
    if (e == hipSuccess && stop != NULL)
        e = simhip_result(cuEventRecord((CUevent)stop, (CUstream)stream));
    return e;
}

struct module_launch {
    hipFunction_t f;
    uint32_t g[3], b[3];
    hipStream_t stream;
    void **params, **extra;
};

static hipError_t go_module(void *arg)
{
    struct module_launch *l = arg;
    return launch(l->f, l->g[0], l->g[1], l->g[2], l->b[0], l->b[1], l->b[2], l->stream, l->params, l->extra);
}

/* hipExtModuleLaunchKernel has C++ linkage: its symbol is the mangled name.
 * Its sizes are in work-items (global), ours in blocks. */
SIMHIP_EXPORT hipError_t simhip_ext_module_launch(hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
                                                  uint32_t ly, uint32_t lz, size_t sharedMemBytes, hipStream_t stream,
                                                  void **kernelParams, void **extra, hipEvent_t startEvent,
                                                  hipEvent_t stopEvent, uint32_t flags)
    __asm__(KREX_HIP_SYMBOL_hipExtModuleLaunchKernel);
hipError_t simhip_ext_module_launch(hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
                                    uint32_t lz, size_t sharedMemBytes, hipStream_t stream, void **kernelParams,
                                    void **extra, hipEvent_t startEvent, hipEvent_t stopEvent, uint32_t flags)
{
    (void)sharedMemBytes;
    (void)flags;
    if (lx == 0 || ly == 0 || lz == 0)
        return simhip_fail(hipErrorInvalidValue);
    struct module_launch l = {f, {(gx + lx - 1) / lx, (gy + ly - 1) / ly, (gz + lz - 1) / lz}, {lx, ly, lz},
                              stream, kernelParams, extra};
    return launch_between(startEvent, stopEvent, stream, go_module, &l);
}

/* ---- kernels by host address ---------------------------------------------- */

#define MAX_HOST_KERNELS 256

static pthread_mutex_t host_mu = PTHREAD_MUTEX_INITIALIZER;
static CUmodule host_module[KREX_SIM_MAX_DEVICES];
struct host_kernel {
    const void *address;
    int device;
    CUfunction f;
};
static struct host_kernel host_kernels[MAX_HOST_KERNELS];
static unsigned n_host_kernels;

static hipError_t host_kernel(const void *address, CUfunction *out)
{
    if (address == NULL)
        return simhip_fail(hipErrorInvalidDeviceFunction);
    int device = 0;
    hipError_t e = hipGetDevice(&device);
    if (e != hipSuccess)
        return e;
    pthread_mutex_lock(&host_mu);
    for (unsigned i = 0; i < n_host_kernels; i++)
        if (host_kernels[i].address == address && host_kernels[i].device == device) {
            *out = host_kernels[i].f;
            pthread_mutex_unlock(&host_mu);
            return hipSuccess;
        }
    CUresult r = host_module[device] == NULL ? cuModuleLoadData(&host_module[device], "simhip") : CUDA_SUCCESS;
    char name[KREX_SIM_LOG_NAME_LEN];
    Dl_info info;
    if (dladdr(address, &info) != 0 && info.dli_sname != NULL)
        snprintf(name, sizeof name, "%s", info.dli_sname);
    else
        snprintf(name, sizeof name, "kernel@%p", address);
    if (r == CUDA_SUCCESS)
        r = cuModuleGetFunction(out, host_module[device], name);
    if (r == CUDA_SUCCESS && n_host_kernels < MAX_HOST_KERNELS)
        host_kernels[n_host_kernels++] = (struct host_kernel){address, device, *out};
    pthread_mutex_unlock(&host_mu);
    return simhip_result(r);
}

SIMHIP_EXPORT hipError_t hipLaunchKernel(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
                                         size_t sharedMemBytes, hipStream_t stream)
{
    (void)sharedMemBytes;
    READY();
    CUfunction f;
    hipError_t e = host_kernel(function_address, &f);
    if (e != hipSuccess)
        return e;
    return launch((hipFunction_t)f, numBlocks.x, numBlocks.y, numBlocks.z, dimBlocks.x, dimBlocks.y, dimBlocks.z,
                  stream, args, NULL);
}

struct host_launch {
    const void *address;
    dim3 grid, block;
    void **args;
    hipStream_t stream;
};

static hipError_t go_host(void *arg)
{
    struct host_launch *l = arg;
    return hipLaunchKernel(l->address, l->grid, l->block, l->args, 0, l->stream);
}

SIMHIP_EXPORT hipError_t hipExtLaunchKernel(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
                                            size_t sharedMemBytes, hipStream_t stream, hipEvent_t startEvent,
                                            hipEvent_t stopEvent, int flags)
{
    (void)sharedMemBytes;
    (void)flags;
    struct host_launch l = {function_address, numBlocks, dimBlocks, args, stream};
    return launch_between(startEvent, stopEvent, stream, go_host, &l);
}

SIMHIP_EXPORT hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void *userData)
{
    READY();
    return simhip_result(cuLaunchHostFunc((CUstream)stream, fn, userData));
}
