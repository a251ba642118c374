/*
 * A HIP tenant in C, linked with libamdhip64 (the simulated HIP runtime) and
 * the region API, the way a program built with hipcc links it:
 *
 *   hip_tenant launches N   every launch form once per round, N rounds: hipModuleLaunchKernel,
 *                           hipLaunchKernel, hipExtLaunchKernel, hipExtModuleLaunchKernel (C++
 *                           linkage), hipLaunchKernel through hipGetProcAddress; then a copy each
 *                           way and a memset. Prints the completed kernels.
 *   hip_tenant timing       event timings (hipEventElapsedTime): 1. inside one region
 *                           (protected), 2. outside any region, 3. across two regions,
 *                           4. start inside, end outside (hipEventRecord on hipStreamPerThread,
 *                           the per-thread stream). Prints "expected 3", the unprotected ones.
 *   hip_tenant regions N US N regions, each timing a US-microsecond kernel 3 times with events
 *                           inside it; prints one line per region: "region <n> <ms> <ms> <ms>".
 *
 * Kernels follow the simulator's convention: args[0] the solo duration (ns),
 * args[1] a device counter each completed kernel increments.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

#include "hip_cxx_names.h"
#include "krex.h"

#define KREX_TENANT_HIP 1
#define TENANT "hip_tenant"
#include "tenant_check.h"

/* hip_ext.h is C++: its launch, declared under its exported (mangled) name. */
hipError_t ext_module_launch(hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly,
                             uint32_t lz, size_t shared, hipStream_t stream, void **params, void **extra,
                             hipEvent_t start, hipEvent_t stop, uint32_t flags)
    __asm__(KREX_HIP_SYMBOL_hipExtModuleLaunchKernel);
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int hipVersion, uint64_t flags, int *status);
typedef hipError_t (*launch_fn)(const void *, dim3, dim3, void **, size_t, hipStream_t);

/* A kernel's host address: any function of the program (hipcc's stubs are). */
void sim_host_kernel(void) {}

static hipFunction_t kernel;
static uint64_t *counter;
static uint64_t duration_ns = 100000;

static void **args(void)
{
    static void *params[2];
    params[0] = &duration_ns;
    params[1] = &counter;
    return params;
}

static void launches(int rounds)
{
    dim3 one = {1, 1, 1}, block = {32, 1, 1};
    launch_fn resolved = NULL;
    int status = 0;
    CHECK(hipGetProcAddress("hipLaunchKernel", (void **)&resolved, 50200000, 0, &status));
    for (int i = 0; i < rounds; i++) {
        CHECK(hipModuleLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, NULL, args(), NULL));
        CHECK(hipLaunchKernel((const void *)sim_host_kernel, one, block, args(), 0, NULL));
        CHECK(hipExtLaunchKernel((const void *)sim_host_kernel, one, block, args(), 0, NULL, NULL, NULL, 0));
        CHECK(ext_module_launch(kernel, 32, 1, 1, 32, 1, 1, 0, NULL, args(), NULL, NULL, NULL, 0));
        CHECK(resolved((const void *)sim_host_kernel, one, block, args(), 0, NULL));
    }
    char host[64] = "krex", back[64];
    void *buf;
    CHECK(hipMalloc(&buf, sizeof host));
    CHECK(hipMemcpy(buf, host, sizeof host, hipMemcpyHostToDevice));
    CHECK(hipMemset(buf, 0, 1));
    CHECK(hipMemcpy(back, buf, sizeof back, hipMemcpyDeviceToHost));
    CHECK(hipFree(buf));
    CHECK(hipDeviceSynchronize());
    uint64_t done = 0;
    CHECK(hipMemcpy(&done, counter, sizeof done, hipMemcpyDeviceToHost));
    printf("%llu\n", (unsigned long long)done);
}

static hipEvent_t start, stop;

static float elapsed(void)
{
    float ms = 0;
    CHECK(hipEventSynchronize(stop));
    CHECK(hipEventElapsedTime(&ms, start, stop));
    return ms;
}

static void timed(void)
{
    CHECK(hipEventRecord(start, NULL));
    CHECK(hipModuleLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, NULL, args(), NULL));
    CHECK(hipEventRecord(stop, NULL));
}

static void timings(void)
{
    REGION(krex_region_enter()); /* 1: protected */
    timed();
    elapsed();
    REGION(krex_region_exit());
    wait_gate_open();

    timed(); /* 2: outside */
    elapsed();

    REGION(krex_region_enter()); /* 3: across two regions */
    CHECK(hipEventRecord(start, NULL));
    REGION(krex_region_exit());
    REGION(krex_region_enter());
    CHECK(hipEventRecord(stop, NULL));
    elapsed();
    REGION(krex_region_exit());

    REGION(krex_region_enter()); /* 4: start inside, end outside */
    CHECK(hipEventRecord(start, hipStreamPerThread));
    REGION(krex_region_exit());
    wait_gate_open();
    CHECK(hipEventRecord(stop, hipStreamPerThread));
    elapsed();
    printf("expected 3\n");
}

static void regions(int n, long us)
{
    duration_ns = (uint64_t)us * 1000u;
    for (int r = 0; r < n; r++) {
        REGION(krex_region_enter());
        printf("region %d", r);
        for (int i = 0; i < 3; i++) {
            timed();
            printf(" %.3f", elapsed());
        }
        printf("\n");
        fflush(stdout);
        REGION(krex_region_exit());
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: hip_tenant launches N | timing | regions N US\n");
        return 1;
    }
    hipModule_t module;
    CHECK(hipInit(0));
    CHECK(hipSetDevice(0));
    CHECK(hipModuleLoadData(&module, "krex simulated module"));
    CHECK(hipModuleGetFunction(&kernel, module, "sim_kernel"));
    CHECK(hipMalloc((void **)&counter, sizeof *counter));
    CHECK(hipMemset(counter, 0, sizeof *counter));
    CHECK(hipEventCreate(&start));
    CHECK(hipEventCreate(&stop));
    if (strcmp(argv[1], "launches") == 0 && argc == 3)
        launches(atoi(argv[2]));
    else if (strcmp(argv[1], "timing") == 0)
        timings();
    else if (strcmp(argv[1], "regions") == 0 && argc == 4)
        regions(atoi(argv[2]), atol(argv[3]));
    else
        return 1;
    CHECK(hipEventDestroy(start));
    CHECK(hipEventDestroy(stop));
    return 0;
}
