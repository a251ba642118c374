/*
 * cuGetProcAddress of the simulated driver: maps (name, requested CUDA
 * version, stream flavour) to one of the simulator's own functions, following
 * the driver's versioning (include/krex_procaddr.h). The rows are generated at
 * build time (tools/gen_simcuda_entry_points.py): one per exported entry
 * point, hand-written or declared in simcuda_entry_points.txt, with its
 * version from cudaTypedefs.h.
 *
 * The library is linked with -Bsymbolic-functions, so the pointers returned
 * here are the simulator's own even when a preloaded library interposes the
 * same names.
 */
#include "simcuda_internal.h"

#include <cudaTypedefs.h>

#include "krex_procaddr.h"

static const struct krex_proc_entry table[] = {
#include "simcuda_procaddr_table.inc"
};

static CUresult lookup(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    return krex_procaddr_lookup(table, sizeof table / sizeof table[0], symbol, pfn, cuda_version, flags, status);
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
