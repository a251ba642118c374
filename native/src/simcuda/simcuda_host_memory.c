/*
 * Page-locked host memory of the simulated driver: which host ranges a copy
 * may reach in one DMA (cuMemAllocHost, cuMemHostAlloc, cuMemHostRegister),
 * per process as the driver keeps them. A copy whose host side lies in one
 * costs bytes over the simulated bandwidth; from or to any other (pageable)
 * host memory it costs KREX_SIM_PAGEABLE_COPY_FACTOR times that, as the real
 * driver stages pageable memory through a pinned buffer of its own.
 */
#include <pthread.h>
#include <stdlib.h>

#include "simcuda_internal.h"

static struct {
    struct {
        uintptr_t base;
        size_t size;
    } *v;
    size_t n, cap;
} ranges;
static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;

/* The range that overlaps [p, p + n) (n 0: that starts at p), or -1. Lock held. */
static long find(uintptr_t p, size_t n)
{
    for (size_t i = 0; i < ranges.n; i++) {
        uintptr_t b = ranges.v[i].base;
        if (n == 0 ? b == p : (p < b + ranges.v[i].size && b < p + n))
            return (long)i;
    }
    return -1;
}

CUresult sim_host_pin(const void *p, size_t n)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&ranges_lock);
    if (find((uintptr_t)p, n) >= 0) {
        rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    } else if (ranges.n == ranges.cap) {
        size_t cap = ranges.cap ? 2 * ranges.cap : 64;
        __typeof__(ranges.v) v = realloc(ranges.v, cap * sizeof *v);
        if (v == NULL)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            ranges.v = v, ranges.cap = cap;
    }
    if (rc == CUDA_SUCCESS) {
        ranges.v[ranges.n].base = (uintptr_t)p;
        ranges.v[ranges.n++].size = n;
    }
    pthread_mutex_unlock(&ranges_lock);
    return rc;
}

bool sim_host_unpin(const void *p)
{
    pthread_mutex_lock(&ranges_lock);
    long i = find((uintptr_t)p, 0);
    if (i >= 0)
        ranges.v[i] = ranges.v[--ranges.n];
    pthread_mutex_unlock(&ranges_lock);
    return i >= 0;
}

bool sim_host_pinned(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    bool inside = false;
    pthread_mutex_lock(&ranges_lock);
    for (size_t i = 0; i < ranges.n && !inside; i++)
        inside = a >= ranges.v[i].base && a - ranges.v[i].base <= ranges.v[i].size &&
                 n <= ranges.v[i].size - (a - ranges.v[i].base);
    pthread_mutex_unlock(&ranges_lock);
    return inside;
}
