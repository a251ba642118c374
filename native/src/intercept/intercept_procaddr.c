/*
 * The driver's own resolvers. cuGetProcAddress is how the CUDA runtime, and
 * therefore PyTorch, finds every driver function: libcudart fetches
 * cuGetProcAddress through cuGetProcAddress and asks the returned function for
 * everything else. So when asked for itself it must return our wrapper (the
 * real-pointer map in intercept.c does that), and every answer is swapped.
 */
#include <stddef.h>

#include "intercept.h"

typedef CUresult(CUDAAPI *getproc_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult(CUDAAPI *getproc_v2_fn)(const char *, void **, int, cuuint64_t,
                                         CUdriverProcAddressQueryResult *);

static void swap_result(const char *symbol, void **pfn)
{
    if (pfn != NULL && *pfn != NULL && krex_is_cu_name(symbol)) {
        krex_depth++;
        *pfn = krex_swap(symbol, *pfn);
        krex_depth--;
    }
}

/* The 4-argument form (CUDA 11.3-11.8 headers; still exported). */
#undef cuGetProcAddress
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    getproc_v1_fn real = (getproc_v1_fn)krex_driver_symbol("cuGetProcAddress");
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    krex_depth++;
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    krex_depth--;
    if (r == CUDA_SUCCESS)
        swap_result(symbol, pfn);
    return r;
}

/* The 5-argument form every CUDA 12+ header calls cuGetProcAddress. */
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus)
{
    getproc_v2_fn real = (getproc_v2_fn)krex_driver_symbol("cuGetProcAddress_v2");
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    krex_depth++;
    CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    krex_depth--;
    if (r == CUDA_SUCCESS)
        swap_result(symbol, pfn);
    return r;
}
