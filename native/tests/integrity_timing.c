/*
 * Times from below (intercept_timing.c): the elapsed times the driver
 * returned for a region's judged windows, as its integrity record
 * summarises them. On the simulated driver:
 *
 *   integrity_timing
 *
 * region 1  nine windows on a timed stream, the kernel of window i running
 *           (i + 1) * 20 us; the same window's time asked twice (judged and
 *           kept once); prints `times <ms>...` as cuEventElapsedTime gave
 *           them (%.17g: exact), then `summary <krex_region_timing's line>`
 *           asked inside the region
 * region 2  an event recorded, no elapsed time asked: no timing
 * region 3  4100 windows of a short kernel: 4096 times kept, 4 dropped;
 *           prints `kept <krex_region_timing's line>`
 * region 4  five windows the host paces: a 20 us kernel, 2 ms of host sleep,
 *           another 20 us kernel (the GPU waits for the second launch):
 *           every one host-paced
 * region 5  five windows the host issues ahead: one 20 ms kernel between
 *           two records made microseconds apart (the launch is queued, not
 *           run, by the call)
 *
 * Exits 0 (tenant_check.h: a failed driver call exits 2, a region call 3).
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "krex.h"

#define TENANT "integrity_timing"
#include "tenant_check.h"

static CUfunction kernel;
static CUcontext ctx;
static CUstream timed;
static CUevent start, end;

static float window(unsigned long long ns)
{
    float ms = 0;
    CHECK(cuEventRecord(start, timed));
    sim_launch(kernel, timed, ns);
    CHECK(cuEventRecord(end, timed));
    CHECK(cuEventSynchronize(end));
    CHECK(cuEventElapsedTime_v2(&ms, start, end));
    return ms;
}

/* A window whose GPU time the host sets: the GPU idles between the two
 * kernels until the host, back from its sleep, launches the second. */
static void paced_window(void)
{
    float ms = 0;
    CHECK(cuEventRecord(start, timed));
    sim_launch(kernel, timed, 20000);
    struct timespec nap = {.tv_sec = 0, .tv_nsec = 2000000};
    nanosleep(&nap, NULL);
    sim_launch(kernel, timed, 20000);
    CHECK(cuEventRecord(end, timed));
    CHECK(cuEventSynchronize(end));
    CHECK(cuEventElapsedTime_v2(&ms, start, end));
}

static void print_summary(const char *tag)
{
    char line[256];
    int n = krex_region_timing(line, sizeof line);
    if (n < 0) {
        fprintf(stderr, TENANT ": krex_region_timing: %d\n", n);
        exit(1);
    }
    printf("%s %s\n", tag, line);
}

int main(void)
{
    kernel = sim_kernel_in(&ctx);
    CHECK(cuStreamCreate(&timed, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));

    REGION(krex_region_enter());
    printf("times");
    for (unsigned i = 0; i < 9; i++) {
        float ms = window((i + 1) * 20000ull);
        printf(" %.17g", (double)ms);
        if (i == 8) {
            float again = 0;
            CHECK(cuEventElapsedTime_v2(&again, start, end)); /* the same window: not a second time */
        }
    }
    printf("\n");
    print_summary("summary");
    REGION(krex_region_exit());

    REGION(krex_region_enter());
    CHECK(cuEventRecord(start, timed));
    CHECK(cuEventSynchronize(start));
    REGION(krex_region_exit());

    REGION(krex_region_enter());
    for (unsigned i = 0; i < 4100; i++)
        window(1000);
    print_summary("kept");
    REGION(krex_region_exit());

    REGION(krex_region_enter());
    for (unsigned i = 0; i < 5; i++)
        paced_window();
    REGION(krex_region_exit());

    REGION(krex_region_enter());
    for (unsigned i = 0; i < 5; i++)
        window(20000000ull);
    REGION(krex_region_exit());
    fflush(stdout);
    return 0;
}
