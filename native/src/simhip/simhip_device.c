/*
 * Initialisation, devices, the current device and errors of the simulated
 * HIP runtime.
 *
 * Visible devices like ROCm: HIP_VISIBLE_DEVICES, else ROCR_VISIBLE_DEVICES,
 * is a comma-separated list of the simulated driver's device indices (the
 * runtime hands each AMD tenant its GPU that way); unset, every device is
 * visible. hipInit initialises every visible device (their primary contexts),
 * as the HIP runtime does at start-up; KREX_SIM_CTX_CREATE_MS makes that
 * slow, like a real HIP initialisation.
 */
#include "simhip_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static int n_visible;
static CUdevice visible[KREX_SIM_MAX_DEVICES];
static CUcontext primary[KREX_SIM_MAX_DEVICES];
static _Thread_local int current = -1; /* this thread's device, -1: none chosen yet (device 0) */
static _Thread_local hipError_t last_error = hipSuccess;

hipError_t simhip_fail(hipError_t e)
{
    if (e != hipSuccess)
        last_error = e;
    return e;
}

hipError_t simhip_result(CUresult r)
{
    static const struct {
        CUresult cu;
        hipError_t hip;
    } map[] = {
        {CUDA_SUCCESS, hipSuccess},
        {CUDA_ERROR_INVALID_VALUE, hipErrorInvalidValue},
        {CUDA_ERROR_OUT_OF_MEMORY, hipErrorOutOfMemory},
        {CUDA_ERROR_NOT_INITIALIZED, hipErrorNotInitialized},
        {CUDA_ERROR_DEINITIALIZED, hipErrorDeinitialized},
        {CUDA_ERROR_NO_DEVICE, hipErrorNoDevice},
        {CUDA_ERROR_INVALID_DEVICE, hipErrorInvalidDevice},
        {CUDA_ERROR_INVALID_CONTEXT, hipErrorInvalidContext},
        {CUDA_ERROR_FILE_NOT_FOUND, hipErrorFileNotFound},
        {CUDA_ERROR_INVALID_HANDLE, hipErrorInvalidHandle},
        {CUDA_ERROR_NOT_FOUND, hipErrorNotFound},
        {CUDA_ERROR_NOT_READY, hipErrorNotReady},
        {CUDA_ERROR_NOT_SUPPORTED, hipErrorNotSupported},
        {CUDA_ERROR_OPERATING_SYSTEM, hipErrorOperatingSystem},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].cu == r)
            return simhip_fail(map[i].hip);
    return simhip_fail(hipErrorUnknown);
}

/* The list in HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES, of `count` driver devices. */
static void compute_visible(int count)
{
    const char *env = getenv("HIP_VISIBLE_DEVICES");
    if (env == NULL)
        env = getenv("ROCR_VISIBLE_DEVICES");
    n_visible = 0;
    if (env == NULL) {
        for (int i = 0; i < count && i < KREX_SIM_MAX_DEVICES; i++)
            visible[n_visible++] = i;
        return;
    }
    /* Like ROCm: the list stops at the first entry that is not a valid index. */
    const char *p = env;
    while (*p != '\0' && n_visible < KREX_SIM_MAX_DEVICES) {
        char *end;
        long d = strtol(p, &end, 10);
        if (end == p || d < 0 || d >= count)
            break;
        visible[n_visible++] = (CUdevice)d;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            break;
    }
}

static void init_runtime(void)
{
    init_result = cuInit(0);
    int count = 0;
    if (init_result == CUDA_SUCCESS)
        init_result = cuDeviceGetCount(&count);
    if (init_result != CUDA_SUCCESS)
        return;
    compute_visible(count);
    for (int i = 0; i < n_visible && init_result == CUDA_SUCCESS; i++)
        init_result = cuDevicePrimaryCtxRetain(&primary[i], visible[i]);
}

SIMHIP_EXPORT hipError_t hipInit(unsigned int flags)
{
    if (flags != 0)
        return simhip_fail(hipErrorInvalidValue);
    pthread_once(&init_once, init_runtime);
    return simhip_result(init_result);
}

int simhip_device_count(void)
{
    return hipInit(0) == hipSuccess ? n_visible : 0;
}

hipError_t simhip_device(int ordinal, CUdevice *out)
{
    hipError_t e = hipInit(0);
    if (e != hipSuccess)
        return e;
    if (ordinal < 0 || ordinal >= n_visible)
        return simhip_fail(hipErrorInvalidDevice);
    *out = visible[ordinal];
    return hipSuccess;
}

static hipError_t make_current(int ordinal)
{
    hipError_t e = hipInit(0);
    if (e != hipSuccess)
        return e;
    if (ordinal < 0 || ordinal >= n_visible)
        return simhip_fail(hipErrorInvalidDevice);
    e = simhip_result(cuCtxSetCurrent(primary[ordinal]));
    if (e == hipSuccess)
        current = ordinal;
    return e;
}

hipError_t simhip_ready(void)
{
    hipError_t e = hipInit(0);
    if (e != hipSuccess)
        return e;
    if (n_visible == 0)
        return simhip_fail(hipErrorNoDevice);
    CUcontext c = NULL;
    if (cuCtxGetCurrent(&c) == CUDA_SUCCESS && c != NULL)
        return hipSuccess;
    return make_current(current < 0 ? 0 : current);
}

SIMHIP_EXPORT hipError_t hipSetDevice(int deviceId)
{
    return make_current(deviceId);
}

SIMHIP_EXPORT hipError_t hipGetDevice(int *deviceId)
{
    if (deviceId == NULL)
        return simhip_fail(hipErrorInvalidValue);
    hipError_t e = hipInit(0);
    if (e != hipSuccess)
        return e;
    *deviceId = current < 0 ? 0 : current;
    return hipSuccess;
}

SIMHIP_EXPORT hipError_t hipGetDeviceCount(int *count)
{
    if (count == NULL)
        return simhip_fail(hipErrorInvalidValue);
    hipError_t e = hipInit(0);
    if (e != hipSuccess)
        return e;
    *count = n_visible;
    return n_visible > 0 ? hipSuccess : simhip_fail(hipErrorNoDevice);
}

SIMHIP_EXPORT hipError_t hipDeviceGet(hipDevice_t *device, int ordinal)
{
    if (device == NULL)
        return simhip_fail(hipErrorInvalidValue);
    CUdevice d;
    hipError_t e = simhip_device(ordinal, &d);
    if (e == hipSuccess)
        *device = ordinal;
    return e;
}

SIMHIP_EXPORT hipError_t hipDeviceGetName(char *name, int len, hipDevice_t device)
{
    CUdevice d;
    hipError_t e = simhip_device(device, &d);
    return e != hipSuccess ? e : simhip_result(cuDeviceGetName(name, len, d));
}

SIMHIP_EXPORT hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t device)
{
    CUdevice d;
    hipError_t e = simhip_device(device, &d);
    return e != hipSuccess ? e : simhip_result(cuDeviceTotalMem(bytes, d));
}

SIMHIP_EXPORT hipError_t hipDeviceSynchronize(void)
{
    hipError_t e = simhip_ready();
    return e != hipSuccess ? e : simhip_result(cuCtxSynchronize());
}

SIMHIP_EXPORT hipError_t hipDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return simhip_fail(hipErrorInvalidValue);
    *driverVersion = SIMHIP_RUNTIME_VERSION;
    return hipSuccess;
}

SIMHIP_EXPORT hipError_t hipRuntimeGetVersion(int *runtimeVersion)
{
    return hipDriverGetVersion(runtimeVersion);
}

SIMHIP_EXPORT hipError_t hipGetLastError(void)
{
    hipError_t e = last_error;
    last_error = hipSuccess;
    return e;
}

SIMHIP_EXPORT hipError_t hipPeekAtLastError(void)
{
    return last_error;
}

SIMHIP_EXPORT const char *hipGetErrorName(hipError_t hip_error)
{
    switch (hip_error) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorNotInitialized: return "hipErrorNotInitialized";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorInvalidContext: return "hipErrorInvalidContext";
    case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
    case hipErrorNotFound: return "hipErrorNotFound";
    case hipErrorNotReady: return "hipErrorNotReady";
    case hipErrorNotSupported: return "hipErrorNotSupported";
    default: return "hipErrorUnknown";
    }
}

SIMHIP_EXPORT const char *hipGetErrorString(hipError_t hipError)
{
    return hipGetErrorName(hipError); /* the simulator's strings are the names */
}
