/*
 * A tenant that times a simulated kernel with CUDA events in each of the ways
 * unprotected-timing detection tells apart, linked with -lcuda (the simulated
 * driver) and the region API:
 *
 *   event_timing
 *
 * 1. both events recorded inside one region          -> protected
 * 2. both outside any region                          -> 1 unprotected
 * 3. start in one region, end in the next             -> 1 unprotected
 * 4. inside one region, but the elapsed time taken through
 *    cuGetProcAddress("cuEventElapsedTime", 11000) (the _v1 entry point),
 *    and once more through it outside                 -> 1 unprotected
 * 5. one event recorded inside, one outside (_ptsz)   -> 1 unprotected
 * Prints "expected 4" (the count the runtime should report) and exits 0.
 *
 * The GPU stays this tenant's from the grant until the runtime has reopened
 * the gate after the release (a moment after krex_region_exit returns), and
 * so do the records made in between: before recording "outside", the tenant
 * waits for its gate to open.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "krex.h"
#include "krex_gate.h"

#define TENANT "event_timing"
#include "tenant_check.h"

typedef CUresult(CUDAAPI *elapsed_fn)(float *, CUevent, CUevent);

static CUfunction kernel;
static CUevent start, end;

static void launch(void)
{
    sim_launch(kernel, NULL, 100000);
}

static float elapsed(void)
{
    float ms = 0;
    CHECK(cuEventSynchronize(end));
    CHECK(cuEventElapsedTime_v2(&ms, start, end));
    return ms;
}

int main(void)
{
    CUcontext ctx;
    kernel = sim_kernel_in(&ctx);
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));

    REGION(krex_region_enter()); /* 1 */
    CHECK(cuEventRecord(start, NULL));
    launch();
    CHECK(cuEventRecord(end, NULL));
    elapsed();
    REGION(krex_region_exit());
    wait_gate_open();

    CHECK(cuEventRecord(start, NULL)); /* 2 */
    launch();
    CHECK(cuEventRecord(end, NULL));
    elapsed();

    REGION(krex_region_enter()); /* 3 */
    CHECK(cuEventRecord(start, NULL));
    launch();
    REGION(krex_region_exit());
    REGION(krex_region_enter());
    CHECK(cuEventRecordWithFlags(end, NULL, 0));
    elapsed();
    REGION(krex_region_exit());

    elapsed_fn v1 = NULL;
    CUdriverProcAddressQueryResult status;
    CHECK(cuGetProcAddress_v2("cuEventElapsedTime", (void **)&v1, 11000, 0, &status));
    float ms = 0;
    REGION(krex_region_enter()); /* 4 */
    CHECK(cuEventRecord(start, NULL));
    launch();
    CHECK(cuEventRecord(end, NULL));
    CHECK(cuEventSynchronize(end));
    CHECK(v1(&ms, start, end));
    REGION(krex_region_exit());
    CHECK(v1(&ms, start, end)); /* the events are still those of one region */
    wait_gate_open();
    CHECK(cuEventRecord(end, NULL));
    CHECK(cuEventSynchronize(end));
    CHECK(v1(&ms, start, end));

    REGION(krex_region_enter()); /* 5 */
    CHECK(cuEventRecord_ptsz(start, NULL));
    REGION(krex_region_exit());
    wait_gate_open();
    launch();
    CHECK(cuEventRecord_ptsz(end, NULL));
    elapsed();

    CHECK(cuEventDestroy_v2(start));
    CHECK(cuEventDestroy_v2(end));
    printf("expected 4\n");
    return 0;
}
