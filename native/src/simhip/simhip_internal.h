/*
 * The simulated HIP runtime (libamdhip64.so.5 under build/sim): a simulator
 * for machines without an AMD GPU, never a GPU figure.
 *
 * HIP over the simulated CUDA driver, as HIP runs over CUDA on NVIDIA GPUs:
 * a HIP device is a device of the simulated driver (its primary context), a
 * hipStream_t / hipEvent_t / hipModule_t / hipFunction_t is the driver's
 * handle. So the simulated device file, its process slots and counters, the
 * execution log, contention and the checkpoint lock are the simulated
 * driver's own (include/krex_simcuda.h), shared by the CUDA and the HIP
 * tenants of a machine: nothing of them is copied here. Kernels follow the
 * simulated driver's convention (args[0]: solo duration in ns, args[1]: a
 * counter the kernel increments).
 *
 * Files, one concern each:
 *   simhip_device.c  initialisation, visible devices, current device, errors
 *   simhip_memory.c  allocations, copies, memsets
 *   simhip_launch.c  modules, kernel launches (hipLaunchKernel, hipModule*, hipExt*), host functions
 *   simhip_stream.c  streams, events, capture mode, hipGetProcAddress
 *
 * The calls into the driver go through its exported entry points: the HIP
 * interception library (libkrex_hip.so) sees the HIP calls, never these.
 */
#ifndef KREX_SIMHIP_INTERNAL_H
#define KREX_SIMHIP_INTERNAL_H

#include <cuda.h>

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
/* Exactly the HIP API is exported; everything else is hidden. */
#pragma GCC visibility push(default)
#include <hip/hip_runtime_api.h>
#pragma GCC visibility pop

#include <stdbool.h>

#include "hip_cxx_names.h"
#include "krex_simcuda.h"

#define SIMHIP_EXPORT __attribute__((visibility("default")))
/* The HIP version the simulator answers (HIP_VERSION of its headers). */
#define SIMHIP_RUNTIME_VERSION 50221153

/* The driver's result as HIP's, and remembered for hipGetLastError. */
hipError_t simhip_result(CUresult r);
hipError_t simhip_fail(hipError_t e); /* remembered too */
/* Initialise (hipInit) if not yet, and make the calling thread's current
 * device's primary context current if it has none: what every HIP call that
 * touches a device does implicitly. */
hipError_t simhip_ready(void);
/* The prologue of such a call: returns simhip_ready()'s error. */
#define READY()                                                                                              \
    do {                                                                                                     \
        hipError_t ready_ = simhip_ready();                                                                  \
        if (ready_ != hipSuccess)                                                                            \
            return ready_;                                                                                   \
    } while (0)
/* The visible HIP device `ordinal` as the simulated driver's device. */
hipError_t simhip_device(int ordinal, CUdevice *out);
int simhip_device_count(void);

#endif /* KREX_SIMHIP_INTERNAL_H */
