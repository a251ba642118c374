/*
 * cuGetProcAddress of the forwarding client: maps (name, requested CUDA
 * version, stream flavour) to this library's own entry points, following the
 * driver's versioning (the rows, and the way they are checked, are those of
 * the simulator's table: tools/gen_simcuda_entry_points.py). A name the
 * client does not forward resolves to its stub, which says so when called.
 */
#include "client.h"

#include <cudaTypedefs.h>
#include <string.h>

typedef void (*sim_fn)(void);

#undef cuGetProcAddress

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
#include "forward_procaddr_table.inc"
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

FWD_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

FWD_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
