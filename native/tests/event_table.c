/*
 * A tenant that holds many live CUDA events at once, as a harness does that
 * records hundreds or thousands of timed windows and reads every elapsed
 * time at the end (triton's do_bench), on the simulated driver:
 *
 *   event_table PAIRS
 *
 * 1. inside one region: PAIRS windows (a start record, one short simulated
 *    kernel, an end record), one synchronisation, then every elapsed time
 *    -> protected, or untracked for the events the library's table had no
 *    room for (far more than any harness holds), never unprotected;
 * 2. every event destroyed, then one window outside any region with two
 *    fresh events                                        -> 1 unprotected.
 * Prints "expected 1" (the unprotected count the runtime should report) and
 * exits 0.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "krex.h"

#define TENANT "event_table"
#include "tenant_check.h"

static CUfunction kernel;

static void launch(void)
{
    sim_launch(kernel, NULL, 1000);
}

int main(int argc, char **argv)
{
    long pairs = argc == 2 ? strtol(argv[1], NULL, 10) : 0;
    if (pairs <= 0) {
        fprintf(stderr, "usage: " TENANT " PAIRS\n");
        return 1;
    }
    CUcontext ctx;
    kernel = sim_kernel_in(&ctx);
    CUevent *starts = calloc((size_t)pairs, sizeof *starts), *ends = calloc((size_t)pairs, sizeof *ends);
    if (starts == NULL || ends == NULL)
        return 1;
    for (long i = 0; i < pairs; i++) {
        CHECK(cuEventCreate(&starts[i], CU_EVENT_DEFAULT));
        CHECK(cuEventCreate(&ends[i], CU_EVENT_DEFAULT));
    }

    REGION(krex_region_enter()); /* 1 */
    for (long i = 0; i < pairs; i++) {
        CHECK(cuEventRecord(starts[i], NULL));
        launch();
        CHECK(cuEventRecord(ends[i], NULL));
    }
    CHECK(cuCtxSynchronize());
    float ms = 0;
    for (long i = 0; i < pairs; i++)
        CHECK(cuEventElapsedTime_v2(&ms, starts[i], ends[i]));
    REGION(krex_region_exit());
    wait_gate_open();

    for (long i = 0; i < pairs; i++) { /* 2 */
        CHECK(cuEventDestroy_v2(starts[i]));
        CHECK(cuEventDestroy_v2(ends[i]));
    }
    CUevent start, end;
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));
    CHECK(cuEventRecord(start, NULL));
    launch();
    CHECK(cuEventRecord(end, NULL));
    CHECK(cuEventSynchronize(end));
    CHECK(cuEventElapsedTime_v2(&ms, start, end));
    CHECK(cuEventDestroy_v2(start));
    CHECK(cuEventDestroy_v2(end));
    free(starts);
    free(ends);
    printf("expected 1\n");
    return 0;
}
