/*
 * The catalogue of timing hacks measurement integrity catches (and honest
 * timings it must leave alone), one region each, on the simulated driver:
 *
 *   integrity_hacks
 *
 * Each scenario enters a region, times simulated kernels with two CUDA events
 * on a timed stream T, reads the elapsed time inside the region and exits.
 * The runtime's record of region k (in order) must say:
 *
 *   honest         launch on T                                   clean
 *   side_stream    launch on T and on S, S never joined to T     escaped
 *   thread         a second thread launches on T in the window   other_thread
 *   launch_only    end recorded before the work is queued        empty
 *   other_stream   events on E, work on S joined to E            stream_mismatch
 *   fork_join      work on T and S, S joined by an event wait    clean
 *   synced         work on S synchronised before the end record  clean
 *   legacy         events on the legacy default stream, work on a
 *                  blocking stream B (implicitly joined)          clean
 *   graph          a graph of two kernels replayed on T           clean
 *   graph_side     the same graph replayed on S, never joined     escaped
 *   side_only      nothing on T: S forked from T after the start,
 *                  all the work on S, S joined back to T          clean
 *   two_sides      nothing on T: S and O forked from T, work on
 *                  both, both joined back                         clean
 *   start_fork     nothing on T: S waits on the start event
 *                  itself, work on S, S synchronised on the host  clean
 *   side_unjoined  nothing on T: S forked, work on S, never
 *                  joined                                         escaped, stream_mismatch
 *   many_events    nothing on T: 300 events recorded on T that no
 *                  stream waits on, then S forked, work, joined   clean
 *
 * (other_stream: the work on S never waited for anything of E, so it may
 * run before the start event fires, while E is still busy.)
 *
 * Prints each scenario's name as it runs and exits 0.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "krex.h"

#define TENANT "integrity_hacks"
#include "tenant_check.h"

static CUfunction kernel;
static CUcontext ctx;
static CUstream timed, side, other, blocking;
static CUevent start, end, fork_ev, join_ev;
static CUgraphExec graph;
static CUevent unwaited[300]; /* many_events' events, alive through its window */

/* A graph of two kernel nodes (the simulator replays them in order). */
static void make_graph(void)
{
    CUgraph g;
    CUgraphNode nodes[2];
    unsigned long long duration = 50000;
    CUdeviceptr none = 0;
    void *params[] = {&duration, &none};
    CUDA_KERNEL_NODE_PARAMS p = {.func = kernel, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32,
                                 .blockDimY = 1, .blockDimZ = 1, .kernelParams = params};
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphAddKernelNode_v2(&nodes[0], g, NULL, 0, &p));
    CHECK(cuGraphAddKernelNode_v2(&nodes[1], g, &nodes[0], 1, &p));
    CHECK(cuGraphInstantiateWithFlags(&graph, g, 0));
    CHECK(cuGraphDestroy(g));
}

static void launch(CUstream stream)
{
    sim_launch(kernel, stream, 50000);
}

static void *background(void *arg)
{
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    launch(timed);
    return NULL;
}

static void begin(const char *name, CUstream stream)
{
    printf("%s\n", name);
    fflush(stdout);
    REGION(krex_region_enter());
    CHECK(cuEventRecord(start, stream));
}

/* torch's `side.wait_stream(timed)`: an event recorded on the timed stream, waited on by `side`. */
static void fork_from_timed(CUstream side_stream)
{
    CUevent ev;
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(ev, timed));
    CHECK(cuStreamWaitEvent(side_stream, ev, 0));
    CHECK(cuEventDestroy(ev));
}

/* torch's `timed.wait_stream(side)`. */
static void join_to_timed(CUstream side_stream)
{
    CUevent ev;
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(ev, side_stream));
    CHECK(cuStreamWaitEvent(timed, ev, 0));
    CHECK(cuEventDestroy(ev));
}

static void finish(CUstream stream)
{
    float ms = 0;
    CHECK(cuEventRecord(end, stream));
    CHECK(cuEventSynchronize(end));
    CHECK(cuEventElapsedTime_v2(&ms, start, end));
    CHECK(cuCtxSynchronize()); /* nothing of this scenario runs into the next */
    REGION(krex_region_exit());
}

int main(void)
{
    kernel = sim_kernel_in(&ctx);
    CHECK(cuStreamCreate(&timed, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CUevent *events[] = {&start, &end, &fork_ev, &join_ev};
    for (unsigned i = 0; i < 4; i++)
        CHECK(cuEventCreate(events[i], CU_EVENT_DEFAULT));

    begin("honest", timed);
    launch(timed);
    finish(timed);

    begin("side_stream", timed);
    launch(timed);
    launch(side); /* may still run when the end event fires */
    finish(timed);

    begin("thread", timed);
    pthread_t t;
    pthread_create(&t, NULL, background, NULL);
    pthread_join(t, NULL);
    finish(timed);

    begin("launch_only", timed);
    CHECK(cuEventRecord(end, timed)); /* the end before the work */
    launch(timed);
    {
        float ms = 0;
        CHECK(cuEventSynchronize(end));
        CHECK(cuEventElapsedTime_v2(&ms, start, end));
        CHECK(cuCtxSynchronize());
        REGION(krex_region_exit());
    }

    begin("other_stream", other);
    launch(side);
    CHECK(cuEventRecord(join_ev, side));
    CHECK(cuStreamWaitEvent(other, join_ev, 0));
    finish(other);

    begin("fork_join", timed);
    CHECK(cuEventRecord(fork_ev, timed));
    CHECK(cuStreamWaitEvent(side, fork_ev, 0));
    launch(timed);
    launch(side);
    CHECK(cuEventRecord(join_ev, side));
    CHECK(cuStreamWaitEvent(timed, join_ev, 0));
    finish(timed);

    begin("synced", timed);
    launch(side);
    CHECK(cuStreamSynchronize(side));
    launch(timed);
    finish(timed);

    begin("legacy", NULL);
    launch(blocking); /* the legacy stream's end record waits for it */
    launch(NULL);
    finish(NULL);

    make_graph();
    begin("graph", timed);
    CHECK(cuGraphLaunch(graph, timed));
    finish(timed);

    begin("graph_side", timed);
    CHECK(cuGraphLaunch(graph, side));
    launch(timed);
    finish(timed);
    CHECK(cuGraphExecDestroy(graph));

    begin("side_only", timed);
    fork_from_timed(side);
    launch(side);
    join_to_timed(side);
    finish(timed);

    begin("two_sides", timed);
    fork_from_timed(side);
    fork_from_timed(other);
    launch(side);
    launch(other);
    join_to_timed(side);
    join_to_timed(other);
    finish(timed);

    begin("start_fork", timed);
    CHECK(cuStreamWaitEvent(side, start, 0));
    launch(side);
    CHECK(cuStreamSynchronize(side));
    finish(timed);

    begin("side_unjoined", timed);
    fork_from_timed(side);
    launch(side);
    finish(timed);

    begin("many_events", timed);
    for (unsigned i = 0; i < 300; i++) { /* recorded after the start, never waited on */
        CHECK(cuEventCreate(&unwaited[i], CU_EVENT_DISABLE_TIMING));
        CHECK(cuEventRecord(unwaited[i], timed));
    }
    fork_from_timed(side);
    launch(side);
    join_to_timed(side);
    finish(timed);
    for (unsigned i = 0; i < 300; i++)
        CHECK(cuEventDestroy(unwaited[i]));

    return 0;
}
