/*
 * The HIP library's vendor hooks (intercept_internal.h) for the shared
 * interception core: libamdhip64 by its sonames (ROCm 5, 6 and 7 and the
 * development link name), the hip* names (and the mangled names of the
 * C++-linkage launches), the resolver hipGetProcAddress (ROCm >= 6.2), and
 * stream flags for measurement integrity.
 */
#include <stddef.h>
#include <string.h>

#include "hip_intercept.h"

const char *const krex_driver_sonames[] = {
    "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so", NULL,
};

KREX_NO_SANITIZE bool krex_is_api_name(const char *name)
{
    if (name == NULL)
        return false;
    if (name[0] == '_' && name[1] == 'Z') { /* _Z<length>hip...: a C++-linkage entry point */
        name += 2;
        while (*name >= '0' && *name <= '9')
            name++;
    }
    return name[0] == 'h' && name[1] == 'i' && name[2] == 'p' && name[3] >= 'A' && name[3] <= 'Z';
}

bool krex_never_swapped(const char *name)
{
    (void)name;
    return false;
}

/* hipGetProcAddress came with ROCm 6.2; the headers built against may be
 * older, so its prototype is spelt out here (ROCm 6.2's). */
typedef int krex_hip_query_result;
KREX_EXPORT hipError_t hipGetProcAddress(const char *symbol, void **pfn, int hipVersion, uint64_t flags,
                                         krex_hip_query_result *symbolStatus);
typedef hipError_t (*procaddr_fn)(const char *, void **, int, uint64_t, krex_hip_query_result *);

/* A resolver hands out wrappers: whatever it returns for a gated name is
 * swapped for ours (intercept.c), as with dlsym. */
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int hipVersion, uint64_t flags,
                             krex_hip_query_result *symbolStatus)
{
    procaddr_fn real = (procaddr_fn)krex_driver_symbol("hipGetProcAddress");
    if (real == NULL)
        return hipErrorNotFound;
    krex_depth++;
    hipError_t r = real(symbol, pfn, hipVersion, flags, symbolStatus);
    krex_depth--;
    if (r == hipSuccess && pfn != NULL && *pfn != NULL && krex_depth == 0 && krex_is_api_name(symbol)) {
        krex_depth++;
        *pfn = krex_swap(symbol, *pfn);
        krex_depth--;
    }
    return r;
}

void krex_map_resolvers(void *driver, void (*put)(void *real, void *wrapper))
{
    put(krex_real_dlsym(driver, "hipGetProcAddress"), (void *)hipGetProcAddress);
}

bool krex_is_resolver_wrapper(const void *p)
{
    return p == (void *)hipGetProcAddress;
}

typedef hipError_t (*stream_flags_fn)(hipStream_t, unsigned int *);

bool krex_stream_blocking(const void *stream)
{
    static stream_flags_fn flags_of;
    if (flags_of == NULL)
        flags_of = (stream_flags_fn)krex_driver_symbol("hipStreamGetFlags");
    unsigned int flags = 0;
    if (flags_of == NULL)
        return false; /* cannot say: not joined */
    krex_depth++;
    hipError_t r = flags_of((hipStream_t)stream, &flags);
    krex_depth--;
    return r == hipSuccess && !(flags & hipStreamNonBlocking);
}
