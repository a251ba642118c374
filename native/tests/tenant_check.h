/* The C test tenants' checks: a failed driver call exits 2, a failed region
 * call exits 3, each naming the call. Define TENANT (the program's name)
 * before including it, and KREX_TENANT_HIP for a HIP tenant (HIP results).
 *
 * wait_gate_open: the GPU stays the tenant's from the grant until the
 * runtime has reopened the gate after the release (a moment after
 * krex_region_exit returns); a tenant about to act "outside a region" waits
 * for its gate to open first. */
#ifndef KREX_TENANT_CHECK_H
#define KREX_TENANT_CHECK_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "krex_gate.h"

#ifdef KREX_TENANT_HIP
#define TENANT_RESULT hipError_t
#define TENANT_SUCCESS hipSuccess
#else
#define TENANT_RESULT CUresult
#define TENANT_SUCCESS CUDA_SUCCESS
#endif

#define CHECK(call)                                                                 \
    do {                                                                            \
        TENANT_RESULT r_ = (call);                                                  \
        if (r_ != TENANT_SUCCESS) {                                                 \
            fprintf(stderr, TENANT ": %s failed: %d\n", #call, (int)r_);            \
            exit(2);                                                                \
        }                                                                           \
    } while (0)
#define REGION(call)                                                                \
    do {                                                                            \
        int r_ = (call);                                                            \
        if (r_ != 0) {                                                              \
            fprintf(stderr, TENANT ": %s failed: %d\n", #call, r_);                 \
            exit(3);                                                                \
        }                                                                           \
    } while (0)

static inline void wait_gate_open(void)
{
    const char *path = getenv(KREX_ENV_GATE_PATH);
    if (path == NULL)
        return; /* no gate (not policy krex): regions are no-ops */
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, TENANT ": cannot open the gate %s\n", path);
        exit(4);
    }
    const struct krex_gate_header *gate = mmap(NULL, sizeof *gate, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (gate == MAP_FAILED)
        exit(4);
    for (int i = 0; i < 10000 && (__atomic_load_n(&gate->gate_word, __ATOMIC_SEQ_CST) & KREX_GATE_CLOSED); i++)
        usleep(1000);
    munmap((void *)gate, sizeof *gate);
}

#ifndef KREX_TENANT_HIP
/* Device 0's primary context, made current, and the simulated driver's
 * kernel (include cuda.h first). */
static inline CUfunction sim_kernel_in(CUcontext *ctx)
{
    CUdevice dev;
    CUmodule module;
    CUfunction kernel;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(ctx, dev));
    CHECK(cuCtxSetCurrent(*ctx));
    CHECK(cuModuleLoadData(&module, "krex simulated module"));
    CHECK(cuModuleGetFunction(&kernel, module, "sim_kernel"));
    return kernel;
}

/* One launch of the simulated kernel, running for `ns` of simulated time. */
static inline void sim_launch(CUfunction kernel, CUstream stream, unsigned long long ns)
{
    CUdeviceptr none = 0;
    void *params[] = {&ns, &none};
    CHECK(cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL));
}
#endif

#endif
