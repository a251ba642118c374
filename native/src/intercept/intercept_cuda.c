/*
 * The CUDA library's vendor hooks (intercept_internal.h) for the shared
 * interception core (intercept.c) and the measurement-integrity analysis:
 * the driver's soname, the cu* names, the resolvers we wrap, stream flags.
 */
#include <stddef.h>
#include <string.h>

#include "intercept.h"

const char *const krex_driver_sonames[] = {"libcuda.so.1", NULL};

KREX_NO_SANITIZE bool krex_is_cu_name(const char *name)
{
    return name != NULL && name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z';
}

KREX_NO_SANITIZE bool krex_is_api_name(const char *name)
{
    return krex_is_cu_name(name);
}

/* The driver's private tables: what they hold is not ours to wrap. */
bool krex_never_swapped(const char *name)
{
    return strcmp(name, "cuGetExportTable") == 0;
}

/* The resolvers we wrap (intercept_procaddr.c). */
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus);

void krex_map_resolvers(void *driver, void (*put)(void *real, void *wrapper))
{
    put(krex_real_dlsym(driver, "cuGetProcAddress"), (void *)cuGetProcAddress);
    put(krex_real_dlsym(driver, "cuGetProcAddress_v2"), (void *)cuGetProcAddress_v2);
}

bool krex_is_resolver_wrapper(const void *p)
{
    return p == (void *)cuGetProcAddress || p == (void *)cuGetProcAddress_v2;
}

typedef CUresult(CUDAAPI *stream_flags_fn)(CUstream, unsigned int *);

bool krex_stream_blocking(const void *stream)
{
    static stream_flags_fn flags_of;
    if (flags_of == NULL)
        flags_of = (stream_flags_fn)krex_driver_symbol("cuStreamGetFlags");
    unsigned int flags = 0;
    if (flags_of == NULL)
        return false; /* cannot say: not joined */
    krex_depth++;
    CUresult r = flags_of((CUstream)stream, &flags);
    krex_depth--;
    return r == CUDA_SUCCESS && !(flags & CU_STREAM_NON_BLOCKING);
}
