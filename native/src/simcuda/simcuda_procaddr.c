/*
 * cuGetProcAddress: maps (name, requested CUDA version, stream flavour) to
 * one of the simulator's own functions, following the driver's versioning:
 * each row is one signature of an entry point, with the CUDA version that
 * introduced it (the vNNNNN of cudaTypedefs.h) and, where the driver has one,
 * its per-thread-default-stream (_ptsz / _ptds) variant. The newest row not
 * newer than the requested version wins, e.g. ("cuMemAlloc", 12000) is
 * cuMemAlloc_v2 and ("cuCtxSynchronize", 13000) is cuCtxSynchronize_v2.
 *
 * The rows are generated at build time (tools/gen_simcuda_entry_points.py):
 * one per exported entry point, hand-written or declared in
 * simcuda_entry_points.txt, with its version from cudaTypedefs.h. CHECKED()
 * makes the compiler compare each function with the PFN typedef of that
 * version: a row with the wrong version or function does not build.
 *
 * The library is linked with -Bsymbolic-functions, so the pointers returned
 * here are the simulator's own even when a preloaded library interposes the
 * same names.
 */
#include "simcuda_internal.h"

#include <cudaTypedefs.h>
#include <string.h>

typedef void (*sim_fn)(void);

struct proc_entry {
    const char *name;
    int version;
    sim_fn fn;
    sim_fn fn_per_thread; /* NULL: the same function serves both flavours */
};

#define CHECKED(pfn, sym) ((sim_fn)(1 ? (sym) : (pfn)0))
#define ROW(name, ver, sym) {#name, ver, CHECKED(PFN_##name##_v##ver, sym), NULL}
/* ptver is the per-thread typedef's suffix, e.g. 7000_ptsz */
#define ROW_PT(name, ver, sym, ptver, ptsym)                                                                 \
    {#name, ver, CHECKED(PFN_##name##_v##ver, sym), CHECKED(PFN_##name##_v##ptver, ptsym)}

static const struct proc_entry table[] = {
#include "simcuda_procaddr_table.inc"
};

static CUresult lookup(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    CUdriverProcAddressQueryResult ignored;
    if (!status)
        status = &ignored;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const struct proc_entry *best = NULL;
    bool known = false;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) != 0)
            continue;
        known = true;
        if (table[i].version <= cuda_version && (!best || table[i].version > best->version))
            best = &table[i];
    }
    if (!best) {
        *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    /* DEFAULT (0) means the legacy default stream at the driver level. */
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    sim_fn fn = per_thread && best->fn_per_thread ? best->fn_per_thread : best->fn;
    *pfn = (void *)fn;
    *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
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
