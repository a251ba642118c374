/*
 * The runtime's state per thread and per process: the last error, the current
 * device and its primary context, the error strings, and the entry points it
 * does not have.
 */
#include "cudart.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- errors ---------------------------------------------------------------------- */

struct cudart_error {
    cudaError_t code;
    const char *name;
    const char *text;
};

static const struct cudart_error errors[] = {
#include "cudart_errors.inc"
};

static __thread cudaError_t last_error = cudaSuccess;

static const struct cudart_error *find_error(int code)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if ((int)errors[i].code == code)
            return &errors[i];
    return NULL;
}

cudaError_t cudart_fail(cudaError_t err)
{
    if (err != cudaSuccess)
        last_error = err;
    return err;
}

cudaError_t cudart_result(CUresult rc)
{
    if (rc == CUDA_SUCCESS)
        return cudaSuccess;
    /* Since CUDA 10.1 the runtime's codes for the driver's errors are the
     * driver's numbers (cudaErrorInvalidValue 1, cudaErrorNotReady 600, ...). */
    const struct cudart_error *e = find_error((int)rc);
    cudaError_t err = e != NULL ? e->code : cudaErrorUnknown;
    /* Not ready is an answer, not an error: it does not become the last error. */
    return err == cudaErrorNotReady ? err : cudart_fail(err);
}

CUDART_EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t err = last_error;
    last_error = cudaSuccess;
    return err;
}

CUDART_EXPORT cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

CUDART_EXPORT const char *cudaGetErrorName(cudaError_t error)
{
    const struct cudart_error *e = find_error((int)error);
    return e != NULL ? e->name : "cudaErrorUnknown";
}

CUDART_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
    const struct cudart_error *e = find_error((int)error);
    return e != NULL ? e->text : "unrecognized error code";
}

/* Present only in forwarded mode's libcuda.so.1 (krex_forward.h): records the
 * call for the runtime and applies forward.fallback. */
extern CUresult krex_forward_unknown_call(const char *name) __attribute__((weak));

cudaError_t cudart_unknown(const char *name)
{
    if (krex_forward_unknown_call != NULL) {
        krex_forward_unknown_call(name); /* says so on stderr, may end the command */
    } else {
        char line[256];
        int n = snprintf(line, sizeof line,
                         "krex cudart: %s is not implemented by forwarded mode's CUDA runtime: it fails with "
                         "cudaErrorNotSupported; run the program with the toolkit's libcudart to use it\n",
                         name);
        ssize_t w = write(2, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        (void)w;
    }
    return cudart_fail(cudaErrorNotSupported);
}

/* The generated stubs' entry (they return an int, cudaError_t's ABI). */
int cudart_stub(const char *name)
{
    return (int)cudart_unknown(name);
}

/* ---- devices and primary contexts ----------------------------------------------- */

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[CUDART_MAX_DEVICES]; /* retained by this process, NULL: not (yet) */
static int device_count = -1;                  /* -1: driver not initialised yet */
static __thread int current_device;
static __thread CUcontext made_current; /* what this thread last made current */

static int count_devices(void)
{
    /* Called under ctx_lock. A driver that cannot start has no devices. */
    if (device_count < 0) {
        int n = 0;
        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS)
            n = 0;
        device_count = n < CUDART_MAX_DEVICES ? n : CUDART_MAX_DEVICES;
    }
    return device_count;
}

int cudart_device_count(void)
{
    pthread_mutex_lock(&ctx_lock);
    int n = count_devices();
    pthread_mutex_unlock(&ctx_lock);
    return n;
}

int cudart_device(void)
{
    return current_device;
}

void cudart_set_device(int device)
{
    current_device = device;
}

cudaError_t cudart_context(int *device)
{
    int dev = current_device;
    pthread_mutex_lock(&ctx_lock);
    int n = count_devices();
    CUresult rc = CUDA_SUCCESS;
    if (n == 0)
        rc = CUDA_ERROR_NO_DEVICE;
    else if (dev < 0 || dev >= n)
        rc = CUDA_ERROR_INVALID_DEVICE;
    else if (primary[dev] == NULL) {
        CUdevice d;
        rc = cuDeviceGet(&d, dev);
        if (rc == CUDA_SUCCESS)
            rc = cuDevicePrimaryCtxRetain(&primary[dev], d);
    }
    CUcontext ctx = rc == CUDA_SUCCESS ? primary[dev] : NULL;
    pthread_mutex_unlock(&ctx_lock);
    if (rc != CUDA_SUCCESS)
        return cudart_result(rc);
    /* The driver's current context is per thread: set it once per thread
     * and device (a program's own cuCtxSetCurrent in between is its choice). */
    if (made_current != ctx) {
        rc = cuCtxSetCurrent(ctx);
        if (rc != CUDA_SUCCESS)
            return cudart_result(rc);
        made_current = ctx;
    }
    if (device != NULL)
        *device = dev;
    return cudaSuccess;
}

void cudart_release_context(int device)
{
    pthread_mutex_lock(&ctx_lock);
    if (device >= 0 && device < CUDART_MAX_DEVICES && primary[device] != NULL) {
        CUdevice d;
        if (cuDeviceGet(&d, device) == CUDA_SUCCESS)
            cuDevicePrimaryCtxRelease(d);
        if (made_current == primary[device]) {
            cuCtxSetCurrent(NULL);
            made_current = NULL;
        }
        primary[device] = NULL;
    }
    pthread_mutex_unlock(&ctx_lock);
}
