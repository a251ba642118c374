/*
 * Driver entry points of the simulated CUDA driver. Each exported function is
 * a thin gated wrapper (SIM_GATED: the checkpoint lock can hold it) around a
 * static implementation; implementations never call exported functions, so
 * a preloaded interception library sees exactly the application's calls.
 */
#include "simcuda_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK_INIT()                                                                                         \
    do {                                                                                                     \
        if (sim_forked())                                                                                    \
            return CUDA_ERROR_NOT_INITIALIZED;                                                          \
        if (!sim_initialized())                                                                              \
            return CUDA_ERROR_NOT_INITIALIZED;                                                               \
    } while (0)

static bool valid_ordinal(CUdevice dev)
{
    return dev >= 0 && dev < sim_proc.visible_count;
}

static const struct krex_sim_device_info *device_info(CUdevice dev)
{
    return &sim_proc.shm->devices[sim_proc.visible[dev]];
}

/* ---- initialisation and version ------------------------------------------- */

static CUresult init_impl(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    return sim_proc.visible_count > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult CUDAAPI cuInit(unsigned int flags)
{
    SIM_GATED(init_impl(flags));
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- devices ----------------------------------------------------------------- */

static CUresult device_get_count(int *count)
{
    CHECK_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim_proc.visible_count;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    SIM_GATED(device_get_count(count));
}

static CUresult device_get(CUdevice *device, int ordinal)
{
    CHECK_INIT();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ordinal(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    SIM_GATED(device_get(device, ordinal));
}

static CUresult device_get_name(char *name, int len, CUdevice dev)
{
    CHECK_INIT();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", device_info(dev)->name);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    SIM_GATED(device_get_name(name, len, dev));
}

static CUresult device_get_uuid(CUuuid *uuid, CUdevice dev)
{
    CHECK_INIT();
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    memcpy(uuid->bytes, device_info(dev)->uuid, sizeof uuid->bytes);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    SIM_GATED(device_get_uuid(uuid, dev));
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    SIM_GATED(device_get_uuid(uuid, dev));
}

static CUresult device_total_mem(size_t *bytes, CUdevice dev)
{
    CHECK_INIT();
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = device_info(dev)->total_mem;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    SIM_GATED(device_total_mem(bytes, dev));
}

static CUresult device_total_mem_v1(unsigned int *bytes, CUdevice dev)
{
    size_t total = 0;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = device_total_mem(&total, dev);
    if (rc == CUDA_SUCCESS)
        *bytes = total > 0xffffffffu ? 0xffffffffu : (unsigned int)total;
    return rc;
}

CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    SIM_GATED(device_total_mem_v1(bytes, dev));
}

/* A few common attributes, shaped like an H100/H200-class part; everything
 * else reads 0. They describe nothing real: the simulator has no SMs. */
static int attribute_value(CUdevice_attribute attrib, CUdevice dev)
{
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return sim_proc.visible[dev] + 1;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 0;
    default: return 0;
    }
}

static CUresult device_get_attribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CHECK_INIT();
    if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pi = attribute_value(attrib, dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    SIM_GATED(device_get_attribute(pi, attrib, dev));
}

static CUresult device_compute_capability(int *major, int *minor, CUdevice dev)
{
    CHECK_INIT();
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *major = attribute_value(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    *minor = attribute_value(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    SIM_GATED(device_compute_capability(major, minor, dev));
}

static CUresult device_get_pci_bus_id(char *bus_id, int len, CUdevice dev)
{
    CHECK_INIT();
    if (!bus_id || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(bus_id, (size_t)len, "00000000:%02X:00.0", sim_proc.visible[dev] + 1);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    SIM_GATED(device_get_pci_bus_id(pciBusId, len, dev));
}

/* ---- contexts ------------------------------------------------------------------ */

/* Each thread's context stack, as in the driver. */
#define SIM_CTX_STACK_DEPTH 64
static _Thread_local struct CUctx_st *ctx_stack[SIM_CTX_STACK_DEPTH];
static _Thread_local int ctx_depth;

static bool valid_ctx(CUcontext ctx)
{
    return ctx && __atomic_load_n(&ctx->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC_CTX;
}

CUcontext sim_ctx_current(void)
{
    if (ctx_depth == 0)
        return NULL;
    CUcontext ctx = ctx_stack[ctx_depth - 1];
    return valid_ctx(ctx) ? ctx : NULL;
}

static CUresult push_ctx(CUcontext ctx)
{
    if (ctx_depth == SIM_CTX_STACK_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

static pthread_mutex_t primary_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st primary_ctx[KREX_SIM_MAX_DEVICES];
static unsigned int primary_refs[KREX_SIM_MAX_DEVICES];
static unsigned int primary_flags[KREX_SIM_MAX_DEVICES];

static CUresult primary_retain(CUcontext *pctx, CUdevice dev)
{
    CHECK_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&primary_mu);
    if (primary_ctx[dev].magic != SIM_MAGIC_CTX)
        sim_ctx_init(&primary_ctx[dev], dev, true, primary_flags[dev]);
    primary_refs[dev]++;
    pthread_mutex_unlock(&primary_mu);
    *pctx = &primary_ctx[dev];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    SIM_GATED(primary_retain(pctx, dev));
}

/* The primary context is never torn down: its handle stays valid for the life
 * of the process (queued work and other threads may still name it). */
static CUresult primary_release(CUdevice dev)
{
    CHECK_INIT();
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&primary_mu);
    if (primary_refs[dev] == 0)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else
        primary_refs[dev]--;
    pthread_mutex_unlock(&primary_mu);
    return rc;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    SIM_GATED(primary_release(dev));
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    SIM_GATED(primary_release(dev));
}

static CUresult primary_reset(CUdevice dev)
{
    CHECK_INIT();
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (primary_ctx[dev].magic == SIM_MAGIC_CTX)
        sim_ctx_synchronize(&primary_ctx[dev]);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    SIM_GATED(primary_reset(dev));
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    SIM_GATED(primary_reset(dev));
}

static CUresult primary_get_state(CUdevice dev, unsigned int *flags, int *active)
{
    CHECK_INIT();
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&primary_mu);
    *flags = primary_flags[dev];
    *active = primary_refs[dev] > 0;
    pthread_mutex_unlock(&primary_mu);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    SIM_GATED(primary_get_state(dev, flags, active));
}

static CUresult primary_set_flags(CUdevice dev, unsigned int flags)
{
    CHECK_INIT();
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&primary_mu);
    primary_flags[dev] = flags;
    primary_ctx[dev].flags = flags;
    pthread_mutex_unlock(&primary_mu);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    SIM_GATED(primary_set_flags(dev, flags));
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    SIM_GATED(primary_set_flags(dev, flags));
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CHECK_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ordinal(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUctx_st *ctx = malloc(sizeof *ctx);
    if (!ctx)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_ctx_init(ctx, dev, false, flags);
    CUresult rc = push_ctx(ctx);
    if (rc != CUDA_SUCCESS) {
        free(ctx);
        return rc;
    }
    *pctx = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    SIM_GATED(ctx_create(pctx, flags, dev));
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    SIM_GATED(ctx_create(pctx, flags, dev));
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
                                CUdevice dev)
{
    (void)paramsArray;
    (void)numParams; /* execution affinity has no meaning on the simulator */
    SIM_GATED(ctx_create(pctx, flags, dev));
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)
{
    (void)ctxCreateParams;
    SIM_GATED(ctx_create(pctx, flags, dev));
}

/* The context is synchronised and invalidated but its memory is kept: idle
 * stream workers may still hold it. */
static CUresult ctx_destroy(CUcontext ctx)
{
    CHECK_INIT();
    if (!valid_ctx(ctx) || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_ctx_synchronize(ctx);
    __atomic_store_n(&ctx->magic, SIM_MAGIC_DEAD, __ATOMIC_RELEASE);
    for (int i = 0; i < ctx_depth; i++) {
        if (ctx_stack[i] == ctx) {
            memmove(&ctx_stack[i], &ctx_stack[i + 1], (size_t)(ctx_depth - i - 1) * sizeof ctx_stack[0]);
            ctx_depth--;
            i--;
        }
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    SIM_GATED(ctx_destroy(ctx));
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    SIM_GATED(ctx_destroy(ctx));
}

static CUresult ctx_set_current(CUcontext ctx)
{
    CHECK_INIT();
    if (!ctx) {
        if (ctx_depth > 0)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!valid_ctx(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0)
        return push_ctx(ctx);
    ctx_stack[ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    SIM_GATED(ctx_set_current(ctx));
}

static CUresult ctx_get_current(CUcontext *pctx)
{
    CHECK_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = sim_ctx_current();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    SIM_GATED(ctx_get_current(pctx));
}

static CUresult ctx_push(CUcontext ctx)
{
    CHECK_INIT();
    if (!valid_ctx(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return push_ctx(ctx);
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
    SIM_GATED(ctx_push(ctx));
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
    SIM_GATED(ctx_push(ctx));
}

static CUresult ctx_pop(CUcontext *pctx)
{
    CHECK_INIT();
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext ctx = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
    SIM_GATED(ctx_pop(pctx));
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
    SIM_GATED(ctx_pop(pctx));
}

static CUresult ctx_sync(CUcontext ctx)
{
    CHECK_INIT();
    if (!ctx)
        ctx = sim_ctx_current();
    if (!valid_ctx(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return sim_ctx_synchronize(ctx);
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    SIM_GATED(ctx_sync(NULL));
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    SIM_GATED(ctx_sync(ctx));
}

static CUresult ctx_get_device(CUdevice *device, CUcontext ctx)
{
    CHECK_INIT();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx)
        ctx = sim_ctx_current();
    if (!valid_ctx(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = ctx->ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    SIM_GATED(ctx_get_device(device, NULL));
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    SIM_GATED(ctx_get_device(device, ctx));
}

static CUresult ctx_get_flags(unsigned int *flags)
{
    CHECK_INIT();
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = sim_ctx_current();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *flags = ctx->flags;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
    SIM_GATED(ctx_get_flags(flags));
}

static CUresult ctx_get_id(CUcontext ctx, unsigned long long *id)
{
    CHECK_INIT();
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx)
        ctx = sim_ctx_current();
    if (!valid_ctx(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *id = ctx->id;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    SIM_GATED(ctx_get_id(ctx, ctxId));
}

static CUresult ctx_get_api_version(CUcontext ctx, unsigned int *version)
{
    CHECK_INIT();
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx)
        ctx = sim_ctx_current();
    if (!valid_ctx(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020; /* what the driver reports for every context since CUDA 3.2 */
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    SIM_GATED(ctx_get_api_version(ctx, version));
}

static CUresult ctx_get_stream_priority_range(int *least, int *greatest)
{
    CHECK_INIT();
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    SIM_GATED(ctx_get_stream_priority_range(leastPriority, greatestPriority));
}

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
    return module_new(module);
}

static CUresult module_load_file(CUmodule *module, const char *fname)
{
    if (!fname)
        return CUDA_ERROR_INVALID_VALUE;
    if (access(fname, R_OK) != 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
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

/* ---- memory: device memory is host memory ------------------------------------- */

struct sim_alloc {
    CUdeviceptr ptr;
    size_t size;
    int phys;
};

static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sim_alloc *allocs;
static size_t alloc_count, alloc_cap;

#define SIM_ALLOC_ALIGN 256

static CUresult mem_alloc(CUdeviceptr *dptr, size_t bytesize)
{
    CHECK_INIT();
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = sim_ctx_current();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    int phys = ctx->phys;
    uint64_t total = sim_proc.shm->devices[phys].total_mem;
    if (bytesize > total || sim_device_mem_used(phys) > total - bytesize)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = NULL;
    if (posix_memalign(&p, SIM_ALLOC_ALIGN, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&alloc_mu);
    if (alloc_count == alloc_cap) {
        size_t cap = alloc_cap ? alloc_cap * 2 : 64;
        struct sim_alloc *grown = realloc(allocs, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&alloc_mu);
            free(p);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        allocs = grown;
        alloc_cap = cap;
    }
    allocs[alloc_count++] = (struct sim_alloc){.ptr = (CUdeviceptr)(uintptr_t)p, .size = bytesize, .phys = phys};
    pthread_mutex_unlock(&alloc_mu);
    __atomic_add_fetch(&sim_proc.slot->mem_used[phys], bytesize, __ATOMIC_RELAXED);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    SIM_GATED(mem_alloc(dptr, bytesize));
}

static CUresult mem_free(CUdeviceptr dptr)
{
    CHECK_INIT();
    if (dptr == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&alloc_mu);
    size_t i = 0;
    while (i < alloc_count && allocs[i].ptr != dptr)
        i++;
    if (i == alloc_count) {
        pthread_mutex_unlock(&alloc_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct sim_alloc a = allocs[i];
    allocs[i] = allocs[--alloc_count];
    pthread_mutex_unlock(&alloc_mu);
    __atomic_sub_fetch(&sim_proc.slot->mem_used[a.phys], a.size, __ATOMIC_RELAXED);
    free((void *)(uintptr_t)a.ptr);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    SIM_GATED(mem_free(dptr));
}

static CUresult mem_get_info(size_t *free_bytes, size_t *total_bytes)
{
    CHECK_INIT();
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = sim_ctx_current();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t total = sim_proc.shm->devices[ctx->phys].total_mem;
    uint64_t used = sim_device_mem_used(ctx->phys);
    *total_bytes = total;
    *free_bytes = used >= total ? 0 : total - used;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total)
{
    SIM_GATED(mem_get_info(free, total));
}

static CUresult mem_get_info_v1(unsigned int *free_bytes, unsigned int *total_bytes)
{
    size_t f = 0, t = 0;
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = mem_get_info(&f, &t);
    if (rc == CUDA_SUCCESS) {
        *free_bytes = f > 0xffffffffu ? 0xffffffffu : (unsigned int)f;
        *total_bytes = t > 0xffffffffu ? 0xffffffffu : (unsigned int)t;
    }
    return rc;
}

CUresult CUDAAPI cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    SIM_GATED(mem_get_info_v1(free, total));
}

/* Page-locked host memory is ordinary host memory here. */
static CUresult mem_alloc_host(void **pp, size_t bytesize)
{
    CHECK_INIT();
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_ctx_current())
        return CUDA_ERROR_INVALID_CONTEXT;
    return posix_memalign(pp, SIM_ALLOC_ALIGN, bytesize) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    SIM_GATED(mem_alloc_host(pp, bytesize));
}

CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize)
{
    SIM_GATED(mem_alloc_host(pp, bytesize));
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    SIM_GATED(mem_alloc_host(pp, bytesize));
}

static CUresult mem_free_host(void *p)
{
    CHECK_INIT();
    free(p);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    SIM_GATED(mem_free_host(p));
}

/* Copies and memsets are stream work: they take simulated time (bytes over
 * the simulated bandwidth) and count as device activity. The synchronous
 * forms queue on the default stream and wait for it. */
static CUresult copy_async(void *dst, const void *src, size_t bytes, CUstream stream, uint16_t kind)
{
    CHECK_INIT();
    if ((!dst || !src) && bytes)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS || bytes == 0)
        return rc;
    return sim_enqueue_copy(s, dst, src, bytes, kind);
}

static CUresult copy_sync(void *dst, const void *src, size_t bytes, uint16_t kind)
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(NULL, &s);
    if (rc == CUDA_SUCCESS)
        rc = copy_async(dst, src, bytes, s, kind);
    if (rc == CUDA_SUCCESS)
        rc = sim_stream_synchronize(s);
    return rc;
}

#define DEVPTR(p) ((void *)(uintptr_t)(p))

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dstDevice), srcHost, ByteCount, KREX_SIM_LOG_MEMCPY_HTOD));
}

CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dstDevice), srcHost, ByteCount, KREX_SIM_LOG_MEMCPY_HTOD));
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy_sync(dstHost, DEVPTR(srcDevice), ByteCount, KREX_SIM_LOG_MEMCPY_DTOH));
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy_sync(dstHost, DEVPTR(srcDevice), ByteCount, KREX_SIM_LOG_MEMCPY_DTOH));
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dstDevice), DEVPTR(srcDevice), ByteCount, KREX_SIM_LOG_MEMCPY_DTOD));
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dstDevice), DEVPTR(srcDevice), ByteCount, KREX_SIM_LOG_MEMCPY_DTOD));
}

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dst), DEVPTR(src), ByteCount, KREX_SIM_LOG_MEMCPY_DTOD));
}

CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    SIM_GATED(copy_sync(DEVPTR(dst), DEVPTR(src), ByteCount, KREX_SIM_LOG_MEMCPY_DTOD));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dstDevice), srcHost, ByteCount, hStream, KREX_SIM_LOG_MEMCPY_HTOD));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                           CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dstDevice), srcHost, ByteCount, hStream, KREX_SIM_LOG_MEMCPY_HTOD));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(dstHost, DEVPTR(srcDevice), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOH));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(dstHost, DEVPTR(srcDevice), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOH));
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dstDevice), DEVPTR(srcDevice), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOD));
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dstDevice), DEVPTR(srcDevice), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOD));
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dst), DEVPTR(src), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOD));
}

CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy_async(DEVPTR(dst), DEVPTR(src), ByteCount, hStream, KREX_SIM_LOG_MEMCPY_DTOD));
}

static CUresult memset_async(CUdeviceptr dst, uint32_t value, unsigned int elem, size_t n, CUstream stream)
{
    CHECK_INIT();
    if (!dst && n)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS || n == 0)
        return rc;
    return sim_enqueue_memset(s, DEVPTR(dst), value, elem, n);
}

static CUresult memset_sync(CUdeviceptr dst, uint32_t value, unsigned int elem, size_t n)
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(NULL, &s);
    if (rc == CUDA_SUCCESS)
        rc = memset_async(dst, value, elem, n, s);
    if (rc == CUDA_SUCCESS)
        rc = sim_stream_synchronize(s);
    return rc;
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    SIM_GATED(memset_sync(dstDevice, uc, 1, N));
}

CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    SIM_GATED(memset_sync(dstDevice, uc, 1, N));
}

CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    SIM_GATED(memset_sync(dstDevice, us, 2, N));
}

CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    SIM_GATED(memset_sync(dstDevice, us, 2, N));
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    SIM_GATED(memset_sync(dstDevice, ui, 4, N));
}

CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    SIM_GATED(memset_sync(dstDevice, ui, 4, N));
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    SIM_GATED(memset_async(dstDevice, uc, 1, N, hStream));
}

CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    SIM_GATED(memset_async(dstDevice, uc, 1, N, hStream));
}

CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    SIM_GATED(memset_async(dstDevice, us, 2, N, hStream));
}

CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    SIM_GATED(memset_async(dstDevice, us, 2, N, hStream));
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    SIM_GATED(memset_async(dstDevice, ui, 4, N, hStream));
}

CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    SIM_GATED(memset_async(dstDevice, ui, 4, N, hStream));
}

/* ---- launches ---------------------------------------------------------------------- */

static bool valid_function(CUfunction f)
{
    return f && __atomic_load_n(&f->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC_FUNC;
}

/* Reads the two simulated kernel arguments (see krex_simcuda.h) from either
 * kernelParams or the `extra` packed-buffer form. */
static CUresult read_kernel_args(void **params, void **extra, struct sim_kernel_args *k)
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
    if (!valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_kernel_args k;
    memset(&k, 0, sizeof k);
    snprintf(k.name, sizeof k.name, "%s", f->name);
    k.grid[0] = gx;
    k.grid[1] = gy;
    k.grid[2] = gz;
    k.block[0] = bx;
    k.block[1] = by;
    k.block[2] = bz;
    CUresult rc = read_kernel_args(params, extra, &k);
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

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
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

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
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

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                unsigned int gridDimZ, unsigned int blockDimX,
                                                unsigned int blockDimY, unsigned int blockDimZ,
                                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
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

CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
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

CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData,
                                          unsigned int flags)
{
    SIM_GATED(stream_add_callback(hStream, callback, userData, flags));
}

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

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
    SIM_GATED(stream_destroy(hStream));
}

static CUresult stream_synchronize(CUstream stream)
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    return rc == CUDA_SUCCESS ? sim_stream_synchronize(s) : rc;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    SIM_GATED(stream_synchronize(hStream));
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    SIM_GATED(stream_synchronize(hStream));
}

static CUresult stream_query(CUstream stream)
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    return rc == CUDA_SUCCESS ? sim_stream_query(s) : rc;
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    SIM_GATED(stream_query(hStream));
}

CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
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

CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
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

/* Stream capture does not exist on the simulator: no stream is ever capturing.
 * The per-thread mode is still kept, as callers save and restore it. */
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

static CUresult stream_is_capturing(CUstream stream, CUstreamCaptureStatus *status)
{
    CHECK_INIT();
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc == CUDA_SUCCESS)
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return rc;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    SIM_GATED(stream_is_capturing(hStream, captureStatus));
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    SIM_GATED(stream_is_capturing(hStream, captureStatus));
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

CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    SIM_GATED(event_record(hEvent, hStream));
}

CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    (void)flags;
    SIM_GATED(event_record(hEvent, hStream));
}

CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
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

CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
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

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
    SIM_GATED(event_destroy(hEvent));
}

/* ---- errors: the table is generated from cuda.h at build time ------------------------ */

struct sim_error {
    CUresult code;
    const char *name;
    const char *text;
};

static const struct sim_error sim_errors[] = {
#include "simcuda_errors.inc"
};

static const struct sim_error *find_error(CUresult code)
{
    for (size_t i = 0; i < sizeof sim_errors / sizeof sim_errors[0]; i++)
        if (sim_errors[i].code == code)
            return &sim_errors[i];
    return NULL;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct sim_error *e = find_error(error);
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct sim_error *e = find_error(error);
    *pStr = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    (void)pExportTableId;
    /* Private tables of the real driver (used by libcudart) do not exist here. */
    if (ppExportTable)
        *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
