/*
 * Driver entry points: modules, kernel launches, host functions.
 */
#include "simcuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- modules: any image is a "simulated module", any name a kernel ------------ */

static CUresult module_new(CUmodule *module)
{
    CHECK_INIT();
    if (!module)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_ctx_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUmod_st *mod = calloc(1, sizeof *mod);
    if (!mod)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_init(&mod->mu, NULL);
    mod->magic = SIM_MAGIC_MODULE;
    *module = mod;
    return CUDA_SUCCESS;
}

static CUresult module_load_data(CUmodule *module, const void *image)
{
    if (!image)
        return CUDA_ERROR_INVALID_VALUE;
    sim_host_latency(KREX_SIM_ENV_MODULE_LOAD_MS);
    return module_new(module);
}

static CUresult module_load_file(CUmodule *module, const char *fname)
{
    if (!fname)
        return CUDA_ERROR_INVALID_VALUE;
    if (access(fname, R_OK) != 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    sim_host_latency(KREX_SIM_ENV_MODULE_LOAD_MS);
    return module_new(module);
}

CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
    SIM_GATED(module_load_file(module, fname));
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    SIM_GATED(module_load_data(module, image));
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues)
{
    (void)numOptions;
    (void)options;
    (void)optionValues;
    SIM_GATED(module_load_data(module, image));
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    SIM_GATED(module_load_data(module, fatCubin));
}

static bool valid_module(CUmodule mod)
{
    return mod && __atomic_load_n(&mod->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC_MODULE;
}

static CUresult module_get_function(CUfunction *hfunc, CUmodule mod, const char *name)
{
    CHECK_INIT();
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_module(mod))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&mod->mu);
    struct CUfunc_st *f = mod->functions;
    while (f && strncmp(f->name, name, sizeof f->name - 1) != 0)
        f = f->next;
    if (!f) {
        f = calloc(1, sizeof *f);
        if (f) {
            snprintf(f->name, sizeof f->name, "%s", name);
            f->module = mod;
            f->next = mod->functions;
            f->magic = SIM_MAGIC_FUNC;
            mod->functions = f;
        } else {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&mod->mu);
    if (f)
        *hfunc = f;
    return rc;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    SIM_GATED(module_get_function(hfunc, hmod, name));
}

/* Launches copy the kernel name, so unloading cannot pull it from under
 * queued work. */
static CUresult module_unload(CUmodule mod)
{
    CHECK_INIT();
    if (!valid_module(mod))
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&mod->mu);
    mod->magic = SIM_MAGIC_DEAD;
    struct CUfunc_st *f = mod->functions;
    mod->functions = NULL;
    pthread_mutex_unlock(&mod->mu);
    while (f) {
        struct CUfunc_st *next = f->next;
        f->magic = SIM_MAGIC_DEAD;
        free(f);
        f = next;
    }
    pthread_mutex_destroy(&mod->mu);
    free(mod);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    SIM_GATED(module_unload(hmod));
}

/* ---- launches ---------------------------------------------------------------------- */

bool sim_valid_function(CUfunction f)
{
    return f && __atomic_load_n(&f->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC_FUNC;
}

/* Lazy loading: the first caller loads (host-side latency), later ones find it loaded. */
static void function_load(CUfunction f)
{
    if (__atomic_load_n(&f->loaded, __ATOMIC_ACQUIRE))
        return;
    sim_host_latency(KREX_SIM_ENV_LAZY_LOAD_MS);
    __atomic_store_n(&f->loaded, 1, __ATOMIC_RELEASE);
}

static CUresult func_is_loaded(CUfunctionLoadingState *state, CUfunction f)
{
    CHECK_INIT();
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    *state = __atomic_load_n(&f->loaded, __ATOMIC_ACQUIRE) ? CU_FUNCTION_LOADING_STATE_LOADED
                                                            : CU_FUNCTION_LOADING_STATE_UNLOADED;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    SIM_GATED(func_is_loaded(state, function));
}

static CUresult func_load(CUfunction f)
{
    CHECK_INIT();
    if (!sim_valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    function_load(f);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncLoad(CUfunction function)
{
    SIM_GATED(func_load(function));
}

/* Every simulated function takes the two arguments of krex_simcuda.h, 8 bytes each. */
static CUresult func_param_info(CUfunction f, size_t index, size_t *offset, size_t *size)
{
    CHECK_INIT();
    if (!sim_valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (index >= KREX_SIM_PARAM_COUNT)
        return CUDA_ERROR_INVALID_VALUE;
    if (offset)
        *offset = index * 8;
    if (size)
        *size = 8;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    SIM_GATED(func_param_info(func, paramIndex, paramOffset, paramSize));
}

/* Reads the two simulated kernel arguments (see krex_simcuda.h) from either
 * kernelParams or the `extra` packed-buffer form. */
CUresult sim_read_kernel_args(void **params, void **extra, struct sim_kernel_args *k)
{
    if (params && extra)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr counter = 0;
    if (params) {
        if (params[KREX_SIM_PARAM_DURATION_NS])
            memcpy(&k->solo_ns, params[KREX_SIM_PARAM_DURATION_NS], sizeof k->solo_ns);
        if (params[KREX_SIM_PARAM_COUNTER_PTR])
            memcpy(&counter, params[KREX_SIM_PARAM_COUNTER_PTR], sizeof counter);
    } else if (extra) {
        const unsigned char *buf = NULL;
        size_t size = 0;
        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
                memcpy(&size, extra[i + 1], sizeof size);
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (buf && size >= 8)
            memcpy(&k->solo_ns, buf, 8);
        if (buf && size >= 16)
            memcpy(&counter, buf + 8, 8);
    }
    k->counter = (uint64_t *)(uintptr_t)counter;
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                       unsigned int by, unsigned int bz, CUstream stream, void **params, void **extra)
{
    CHECK_INIT();
    if (!sim_valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz)
        return CUDA_ERROR_INVALID_VALUE;
    function_load(f);
    struct sim_kernel_args k;
    memset(&k, 0, sizeof k);
    snprintf(k.name, sizeof k.name, "%s", f->name);
    k.grid[0] = gx;
    k.grid[1] = gy;
    k.grid[2] = gz;
    k.block[0] = bx;
    k.block[1] = by;
    k.block[2] = bz;
    CUresult rc = sim_read_kernel_args(params, extra, &k);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct CUstream_st *s;
    rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    return sim_enqueue_kernel(s, &k);
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    (void)sharedMemBytes;
    SIM_GATED(launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, extra));
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                  config->blockDimZ, config->hStream, params, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    SIM_GATED(launch_ex(config, f, kernelParams, extra));
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void **kernelParams)
{
    (void)sharedMemBytes;
    SIM_GATED(launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, kernelParams, NULL));
}

static CUresult launch_host_func(CUstream stream, CUhostFn fn, void *data)
{
    CHECK_INIT();
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    return rc == CUDA_SUCCESS ? sim_enqueue_host_func(s, fn, data) : rc;
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    SIM_GATED(launch_host_func(hStream, fn, userData));
}

static CUresult stream_add_callback(CUstream stream, CUstreamCallback fn, void *data, unsigned int flags)
{
    CHECK_INIT();
    if (!fn || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    return rc == CUDA_SUCCESS ? sim_enqueue_callback(s, fn, data) : rc;
}

CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
    SIM_GATED(stream_add_callback(hStream, callback, userData, flags));
}
