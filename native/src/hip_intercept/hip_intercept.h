/*
 * The HIP interception library (libkrex_hip.so): what its files share.
 *
 * It links the CUDA library's vendor-neutral core (src/intercept: gate
 * client, drain helper threads, region client, stats, events, integrity, the
 * real-pointer -> wrapper map and the exported dlsym) and adds what is HIP's:
 *   hip_gated_table.c  GENERATED typed wrappers of the gated HIP entry points
 *                      (tools/gen_hip_gated_table.py, from the HIP headers)
 *   hip_cxx_names.h    GENERATED exported symbols of the C++-linkage ones
 *   hip_vendor.c       the vendor hooks: libamdhip64's sonames, hip* names,
 *                      hipGetProcAddress, stream flags
 *   hip_drain.c        the drain: device completion of every device used
 *   hip_init.c         HIP's initialisation as a context-class call
 *
 * The HIP headers declare the API with default visibility here, so exactly
 * the wrapped HIP entry points are exported (-fvisibility=hidden otherwise).
 */
#ifndef KREX_HIP_INTERCEPT_H
#define KREX_HIP_INTERCEPT_H

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#pragma GCC visibility push(default)
#include <hip/hip_runtime_api.h>
#pragma GCC visibility pop

#include "intercept_internal.h"
#include "hip_cxx_names.h"

/* Before a gated call that is not itself HIP initialisation: once per
 * process, initialise HIP through the gated hipInit (hip_init.c). */
void krex_hip_init_before_call(void);
void krex_hip_init_after_fork(void);

#endif /* KREX_HIP_INTERCEPT_H */
