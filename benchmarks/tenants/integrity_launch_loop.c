/*
 * Launches N empty simulated kernels on one stream, between two event
 * records, and prints the nanoseconds per launch (CLOCK_MONOTONIC around the
 * launch loop only). Run by benchmarks/integrity_cost.py under a gate held
 * by its tenant, with and without KREX_INTEGRITY=0.
 *
 *   integrity_launch_loop N
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TENANT "integrity_launch_loop"
#include "tenant_check.h" /* native/tests */

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction kernel;
    CUstream stream;
    CUevent start, end;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&module, "krex simulated module"));
    CHECK(cuModuleGetFunction(&kernel, module, "sim_kernel"));
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));
    unsigned long long duration = 0;
    CUdeviceptr none = 0;
    void *params[] = {&duration, &none};
    CHECK(cuEventRecord(start, stream));
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
        CHECK(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
    double t1 = now_ns();
    CHECK(cuEventRecord(end, stream));
    CHECK(cuEventSynchronize(end));
    float ms = 0;
    double t2 = now_ns();
    CHECK(cuEventElapsedTime(&ms, start, end)); /* the window's analysis */
    double t3 = now_ns();
    printf("%.1f %.0f\n", (t1 - t0) / (double)n, t3 - t2);
    return 0;
}
