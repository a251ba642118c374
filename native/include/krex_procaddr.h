/*
 * cuGetProcAddress over a generated table of rows (tools/gen_simcuda_entry_points.py),
 * shared by the simulated driver (src/simcuda/simcuda_procaddr.c) and forwarded
 * mode's client (src/forward/client_procaddr.c): each row is one signature of
 * an entry point, with the CUDA version that introduced it (the vNNNNN of
 * cudaTypedefs.h) and, where the driver has one, its per-thread-default-stream
 * (_ptsz / _ptds) variant. The newest row not newer than the requested version
 * wins, e.g. ("cuMemAlloc", 12000) is cuMemAlloc_v2. CHECKED() makes the
 * compiler compare each function with the PFN typedef of that version: a row
 * with the wrong version or function does not build.
 *
 * Include after cuda.h and cudaTypedefs.h; the includer defines its table.
 */
#ifndef KREX_PROCADDR_H
#define KREX_PROCADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef void (*krex_proc_fn)(void);

struct krex_proc_entry {
    const char *name;
    int version;
    krex_proc_fn fn;
    krex_proc_fn fn_per_thread; /* NULL: the same function serves both flavours */
};

#define KREX_PROC_CHECKED(pfn, sym) ((krex_proc_fn)(1 ? (sym) : (pfn)0))
#define ROW(name, ver, sym) {#name, ver, KREX_PROC_CHECKED(PFN_##name##_v##ver, sym), NULL}
/* ptver is the per-thread typedef's suffix, e.g. 7000_ptsz */
#define ROW_PT(name, ver, sym, ptver, ptsym)                                                                 \
    {#name, ver, KREX_PROC_CHECKED(PFN_##name##_v##ver, sym), KREX_PROC_CHECKED(PFN_##name##_v##ptver, ptsym)}

static inline CUresult krex_procaddr_lookup(const struct krex_proc_entry *table, size_t rows, const char *symbol,
                                            void **pfn, int cuda_version, cuuint64_t flags,
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
    const struct krex_proc_entry *best = NULL;
    bool known = false;
    for (size_t i = 0; i < rows; i++) {
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
    krex_proc_fn fn = per_thread && best->fn_per_thread ? best->fn_per_thread : best->fn;
    *pfn = (void *)fn;
    *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

#endif
