/*
 * What the generated wrapper table needs: cuda.h with every exported variant
 * declared under its real name (the mode the driver's own build uses), so
 * each wrapper is checked against its exact prototype.
 */
#ifndef KREX_INTERCEPT_H
#define KREX_INTERCEPT_H

#define __CUDA_API_VERSION_INTERNAL 1
/* cuda.h then gives its prototypes default visibility: exactly the driver API
 * is exported, the rest of the library is hidden (-fvisibility=hidden). */
#define __CUDA_API_PUSH_VISIBILITY_DEFAULT 1
#include <cuda.h>

#include "intercept_internal.h"

#endif /* KREX_INTERCEPT_H */
