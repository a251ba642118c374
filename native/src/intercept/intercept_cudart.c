/*
 * The CUDA runtime's resolvers, cudaGetDriverEntryPoint(ByVersion) and their
 * per-thread-stream twins: a program linked with the shared libcudart reaches
 * ours first; we call the next definition (libcudart's) and swap its answer.
 * With a static cudart these are not interposable, but the static runtime
 * finds the driver through dlsym and cuGetProcAddress, which are.
 *
 * Declared here with the CUDA 12+ signatures; the return type is the
 * cudaError_t enum, an int in the ABI.
 */
#include <dlfcn.h>
#include <stddef.h>

#include "intercept_internal.h"

#define CUDA_ERROR_SYMBOL_NOT_FOUND 500 /* cudaErrorSymbolNotFound */

typedef int (*entry_fn)(const char *, void **, unsigned long long, void *);
typedef int (*entry_by_version_fn)(const char *, void **, unsigned int, unsigned long long, void *);

KREX_EXPORT int cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                        void *driverStatus);
KREX_EXPORT int cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                             void *driverStatus);
KREX_EXPORT int cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                 unsigned long long flags, void *driverStatus);
KREX_EXPORT int cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
                                                      unsigned int cudaVersion, unsigned long long flags,
                                                      void *driverStatus);

/* The next definition: libcudart in the global scope, or one loaded with
 * RTLD_LOCAL (Python extensions are), which RTLD_NEXT cannot see. */
static void *next_cudart(const char *name)
{
    void *p = krex_real_dlsym(RTLD_NEXT, name);
    static const char *const sonames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"};
    for (size_t i = 0; p == NULL && i < sizeof sonames / sizeof sonames[0]; i++) {
        void *h = dlopen(sonames[i], RTLD_NOLOAD | RTLD_LAZY);
        if (h != NULL) {
            p = krex_real_dlsym(h, name);
            dlclose(h);
        }
    }
    return p;
}

static void swap_result(int rc, const char *symbol, void **funcPtr)
{
    if (rc == 0 && funcPtr != NULL && *funcPtr != NULL && krex_is_cu_name(symbol)) {
        krex_depth++;
        *funcPtr = krex_swap(symbol, *funcPtr);
        krex_depth--;
    }
}

static int entry(const char *name, const char *symbol, void **funcPtr, unsigned long long flags,
                 void *driverStatus)
{
    entry_fn real = (entry_fn)next_cudart(name);
    if (real == NULL)
        return CUDA_ERROR_SYMBOL_NOT_FOUND;
    krex_depth++;
    int rc = real(symbol, funcPtr, flags, driverStatus);
    krex_depth--;
    swap_result(rc, symbol, funcPtr);
    return rc;
}

static int entry_by_version(const char *name, const char *symbol, void **funcPtr, unsigned int cudaVersion,
                            unsigned long long flags, void *driverStatus)
{
    entry_by_version_fn real = (entry_by_version_fn)next_cudart(name);
    if (real == NULL)
        return CUDA_ERROR_SYMBOL_NOT_FOUND;
    krex_depth++;
    int rc = real(symbol, funcPtr, cudaVersion, flags, driverStatus);
    krex_depth--;
    swap_result(rc, symbol, funcPtr);
    return rc;
}

int cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags, void *driverStatus)
{
    return entry("cudaGetDriverEntryPoint", symbol, funcPtr, flags, driverStatus);
}

int cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                 void *driverStatus)
{
    return entry("cudaGetDriverEntryPoint_ptsz", symbol, funcPtr, flags, driverStatus);
}

int cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                     unsigned long long flags, void *driverStatus)
{
    return entry_by_version("cudaGetDriverEntryPointByVersion", symbol, funcPtr, cudaVersion, flags,
                            driverStatus);
}

int cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                          unsigned long long flags, void *driverStatus)
{
    return entry_by_version("cudaGetDriverEntryPointByVersion_ptsz", symbol, funcPtr, cudaVersion, flags,
                            driverStatus);
}
