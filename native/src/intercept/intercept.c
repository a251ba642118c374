/*
 * Interception core: find the real dlsym and the real driver, and map each
 * real gated entry point to our wrapper, so that whatever resolver a program
 * uses (dlsym, cuGetProcAddress, cudaGetDriverEntryPoint) hands out wrappers.
 * The CUDA and the HIP library both link this file; the driver's names and
 * resolvers are the vendor hooks (intercept_cuda.c, hip_intercept/hip_vendor.c).
 *
 * Mapping by pointer identity, not by name, is what makes per-thread-stream
 * and versioned variants right: cuGetProcAddress("cuLaunchKernel", v,
 * PER_THREAD_DEFAULT_STREAM) returns the address of cuLaunchKernel_ptsz, and
 * that address maps to the wrapper with cuLaunchKernel_ptsz's signature.
 *
 * This library never links libcuda: the driver is found at run time, once the
 * program itself has loaded it.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "intercept_internal.h"

KREX_TLS int krex_depth;

/* ---- libc's dlsym --------------------------------------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym_ptr;

KREX_NO_SANITIZE void *krex_real_dlsym(void *handle, const char *name)
{
    dlsym_fn f = __atomic_load_n(&real_dlsym_ptr, __ATOMIC_ACQUIRE);
    if (f == NULL) {
        /* dlvsym is not interposed; versions: glibc 2.34 moved dlsym into libc. */
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (f == NULL)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        if (f == NULL)
            return NULL;
        __atomic_store_n(&real_dlsym_ptr, f, __ATOMIC_RELEASE);
    }
    return f(handle, name);
}

/* ---- the real driver ------------------------------------------------------ */

static void *driver_handle; /* dlopen(krex_driver_sonames[i], NOLOAD), once loaded */

static void *driver(void)
{
    void *h = __atomic_load_n(&driver_handle, __ATOMIC_ACQUIRE);
    if (h != NULL)
        return h;
    /* NOLOAD: we never load the driver ourselves; a program that has not
     * loaded it cannot be submitting work. */
    for (unsigned i = 0; h == NULL && krex_driver_sonames[i] != NULL; i++)
        h = dlopen(krex_driver_sonames[i], RTLD_NOLOAD | RTLD_LAZY);
    if (h != NULL)
        __atomic_store_n(&driver_handle, h, __ATOMIC_RELEASE);
    return h;
}

void *krex_driver_symbol(const char *name)
{
    void *h = driver();
    krex_depth++;
    void *p = h != NULL ? krex_real_dlsym(h, name) : krex_real_dlsym(RTLD_NEXT, name);
    krex_depth--;
    return p;
}

/* ---- real pointer -> wrapper ---------------------------------------------- */

/* Open addressing on the real pointer; written once under map_lock, then read
 * without locks once map_ready is set. */
#define MAP_SLOTS 1024u /* power of two, > 2 * (gated + resolvers) */
struct map_slot {
    void *real;
    void *wrapper;
};
static struct map_slot map[MAP_SLOTS];
static void *gated_real[KREX_GATED_MAX];
static int map_ready;
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned slot_of(const void *p)
{
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 17;
    x *= 0x9e3779b97f4a7c15ull;
    return (unsigned)(x >> 40) & (MAP_SLOTS - 1);
}

static void map_put(void *real, void *wrapper)
{
    if (real == NULL || real == wrapper)
        return;
    for (unsigned s = slot_of(real);; s = (s + 1) & (MAP_SLOTS - 1)) {
        if (map[s].real == NULL || map[s].real == real) {
            map[s].real = real;
            map[s].wrapper = wrapper;
            return;
        }
    }
}

static void *map_get(const void *real)
{
    for (unsigned s = slot_of(real);; s = (s + 1) & (MAP_SLOTS - 1)) {
        if (map[s].real == real)
            return map[s].wrapper;
        if (map[s].real == NULL)
            return NULL;
    }
}

/* Builds the map once the driver is loaded; false while it is not. */
static bool map_build(void)
{
    if (__atomic_load_n(&map_ready, __ATOMIC_ACQUIRE))
        return true;
    void *h = driver();
    if (h == NULL)
        return false;
    krex_depth++;
    pthread_mutex_lock(&map_lock);
    if (!map_ready) {
        unsigned n = krex_gated_count < KREX_GATED_MAX ? krex_gated_count : KREX_GATED_MAX;
        for (unsigned i = 0; i < n; i++) {
            void *real = krex_real_dlsym(h, krex_gated_fns[i].name);
            gated_real[i] = real;
            map_put(real, krex_gated_fns[i].wrapper);
        }
        /* The resolvers we wrap; their real pointers map too. */
        krex_map_resolvers(h, map_put);
        __atomic_store_n(&map_ready, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&map_lock);
    krex_depth--;
    return true;
}

void *krex_gated_real(unsigned i)
{
    if (i >= KREX_GATED_MAX)
        return NULL;
    if (!map_build()) {
        /* Driver not found by name (an unusual soname): the next object in
         * the search order that defines the symbol is the real one. */
        krex_depth++;
        void *p = krex_real_dlsym(RTLD_NEXT, krex_gated_fns[i].name);
        krex_depth--;
        return p;
    }
    return gated_real[i];
}

static bool is_our_wrapper(const void *p)
{
    for (unsigned i = 0; i < krex_gated_count; i++)
        if (krex_gated_fns[i].wrapper == p)
            return true;
    return krex_is_resolver_wrapper(p);
}

/* Binary search: the gated entry of `name` (an exact exported name), or NULL. */
static const struct krex_gated_fn *gated_entry(const char *name)
{
    unsigned lo = 0, hi = krex_gated_count;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        int c = strcmp(krex_gated_fns[mid].name, name);
        if (c == 0)
            return &krex_gated_fns[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static bool is_gated_name(const char *name)
{
    return gated_entry(name) != NULL;
}

void *krex_gated_wrapper(const char *name)
{
    const struct krex_gated_fn *e = gated_entry(name);
    return e != NULL ? e->wrapper : NULL;
}

void *krex_swap(const char *name, void *real)
{
    if (real == NULL || !krex_is_api_name(name) || krex_never_swapped(name))
        return real;
    if (!map_build())
        return real;
    void *w = map_get(real);
    if (w != NULL) {
        krex_stats_note("swapped");
        return w;
    }
    /* A gated name whose pointer we do not know is work we would miss:
     * count it so tests and the GPU suite can insist on zero. */
    if (is_gated_name(name) && !is_our_wrapper(real)) {
        krex_stats_note("unmapped");
        krex_log("no wrapper for %s at %p; its calls bypass the gate", name, real);
    }
    return real;
}

/* ---- the exported dlsym --------------------------------------------------- */

/* Handles are passed on unchanged; only the returned pointer may be swapped.
 * Known limit: RTLD_NEXT from a caller is resolved relative to this library
 * (the next object after it), not relative to the caller. */
KREX_EXPORT KREX_NO_SANITIZE void *dlsym(void *handle, const char *name)
{
    void *p = krex_real_dlsym(handle, name);
    if (p == NULL || !krex_is_api_name(name) || krex_depth > 0)
        return p;
    krex_depth++;
    void *out = krex_swap(name, p);
    krex_depth--;
    return out;
}
