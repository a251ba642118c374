/* What the corpus's driver-API programs share: a check that exits 2 naming
 * the call, a check of a result that exits 1, and device 0's primary context
 * with the simulator's kernel (any name is a kernel; its parameters are
 * (duration ns, counter pointer): each launch adds one to the counter). */
#ifndef KREX_CORPUS_DRIVER_H
#define KREX_CORPUS_DRIVER_H

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                         \
    do {                                                                                                    \
        CUresult r_ = (call);                                                                               \
        if (r_ != CUDA_SUCCESS) {                                                                           \
            fprintf(stderr, "%s: %s failed: %d\n", __FILE__, #call, (int)r_);                               \
            exit(2);                                                                                        \
        }                                                                                                   \
    } while (0)
#define EXPECT(cond)                                                                                        \
    do {                                                                                                    \
        if (!(cond)) {                                                                                      \
            fprintf(stderr, "%s:%d: mismatch: %s\n", __FILE__, __LINE__, #cond);                            \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

static inline CUfunction corpus_setup(CUcontext *ctx, const char *kernel_name)
{
    CUdevice dev;
    CUmodule module;
    CUfunction kernel;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(ctx, dev));
    CHECK(cuCtxSetCurrent(*ctx));
    CHECK(cuModuleLoadData(&module, "krex corpus module"));
    CHECK(cuModuleGetFunction(&kernel, module, kernel_name));
    return kernel;
}

/* One launch of `grid` blocks of `block` threads for `ns` of simulated time,
 * adding one to *counter (0: none). */
static inline void corpus_launch(CUfunction k, unsigned grid, unsigned block, CUstream s, unsigned long long ns,
                                 CUdeviceptr counter)
{
    void *params[] = {&ns, &counter};
    CHECK(cuLaunchKernel(k, grid, 1, 1, block, 1, 1, 0, s, params, NULL));
}

static inline uint64_t corpus_read_counter(CUdeviceptr counter)
{
    uint64_t v = 0;
    CHECK(cuMemcpyDtoH(&v, counter, sizeof v));
    return v;
}

static inline void corpus_fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131u + seed);
}

#endif
