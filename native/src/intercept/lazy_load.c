/*
 * Loading a function before its launch.
 *
 * With CUDA's lazy loading (the default since 12.2) a function's code is
 * uploaded at its first launch, inside cuLaunchKernel. To region entry such a
 * thread is inside a launch, a call it must wait for, for as long as the load
 * takes, where an enqueue takes microseconds. So before a launch the
 * library asks the driver whether the function is loaded and, if
 * not, loads it with cuFuncLoad through the gate: a module-class call, which
 * entry does not wait for (krex_gate.h) and which parks while another
 * tenant's region is held, as the launch would. The launch then only enqueues.
 *
 * The handle a launch takes may also be a CUkernel (context-independent
 * loading): cuFuncIsLoaded refuses it, and its function in the current
 * context comes from cuKernelGetFunction, module-class too. Whatever fails
 * here, the launch goes on as before: this only moves a load earlier. The
 * handles seen are remembered per thread, so a launch costs one cache probe
 * after the first (a handle reused for another function after an unload
 * meets the old behaviour, never a wrong one).
 */
#include "intercept.h"

#include <stdint.h>

#define KNOWN_SLOTS 256u /* power of two */
static KREX_TLS const void *known[KNOWN_SLOTS];

typedef CUresult (CUDAAPI *is_loaded_fn)(CUfunctionLoadingState *state, CUfunction function);
typedef CUresult (CUDAAPI *func_load_fn)(CUfunction function);
typedef CUresult (CUDAAPI *kernel_function_fn)(CUfunction *function, CUkernel kernel);
static is_loaded_fn is_loaded_real;
static int is_loaded_resolved;
/* The loads go through the gate: this library's own definitions, looked up
 * by name (the generated table defines them; it calls in here, not back). */
static func_load_fn func_load;
static kernel_function_fn kernel_function;

static unsigned slot_of(const void *f)
{
    uintptr_t x = (uintptr_t)f;
    return (unsigned)((x >> 4) ^ (x >> 12)) & (KNOWN_SLOTS - 1u);
}

static is_loaded_fn is_loaded(void)
{
    if (!__atomic_load_n(&is_loaded_resolved, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&is_loaded_real, (is_loaded_fn)krex_driver_symbol("cuFuncIsLoaded"), __ATOMIC_RELAXED);
        __atomic_store_n(&func_load, (func_load_fn)krex_gated_wrapper("cuFuncLoad"), __ATOMIC_RELAXED);
        __atomic_store_n(&kernel_function, (kernel_function_fn)krex_gated_wrapper("cuKernelGetFunction"),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&is_loaded_resolved, 1, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&is_loaded_real, __ATOMIC_RELAXED);
}

/* The function's loading state in the current context; false if the driver cannot say. */
static bool state_of(is_loaded_fn query, CUfunction f, CUfunctionLoadingState *state)
{
    krex_depth++;
    CUresult r = query(state, f);
    krex_depth--;
    return r == CUDA_SUCCESS;
}

void krex_load_before_launch(void *handle)
{
    CUfunction f = (CUfunction)handle;
    if (f == NULL || krex_depth > 0 || krex_gate_header() == NULL)
        return;
    unsigned s = slot_of(f);
    if (known[s] == (const void *)f)
        return;
    known[s] = f;
    is_loaded_fn query = is_loaded();
    if (query == NULL || func_load == NULL || kernel_function == NULL) /* a driver before CUDA 12.4 */
        return;
    CUfunctionLoadingState state;
    CUfunction fn = f;
    if (!state_of(query, fn, &state)) {
        if (kernel_function(&fn, (CUkernel)f) != CUDA_SUCCESS || !state_of(query, fn, &state)) {
            krex_stats_note("lazy_load_unknown_handle");
            return;
        }
        krex_stats_note("lazy_load_kernel_handle");
    }
    if (state != CU_FUNCTION_LOADING_STATE_UNLOADED)
        return;
    krex_stats_note(func_load(fn) == CUDA_SUCCESS ? "lazy_load" : "lazy_load_failed");
}
