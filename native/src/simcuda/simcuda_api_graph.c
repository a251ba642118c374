/*
 * Driver entry points: graphs, built by hand (kernel nodes) or captured from
 * a stream (kernels, copies, memsets, host functions), and stream capture.
 *
 * A graph is a list of stream work replayed in the order it was added or
 * captured: dependencies given by hand are accepted and ignored, as one
 * stream running the nodes one after another is one valid order of any
 * dependency graph, and a capture from one stream is that order already.
 * A launch queues a copy of each node on the launch's stream, so the nodes
 * take the simulator's time and memory effects as the same work launched
 * directly would (kernel durations, copy bandwidth, device faults).
 */
#include "simcuda_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_GRAPH_NODES 256

struct CUgraphNode_st {
    unsigned index;
};

struct CUgraph_st {
    uint32_t magic;
    unsigned n;
    struct sim_work nodes[SIM_GRAPH_NODES];
    struct CUgraphNode_st handles[SIM_GRAPH_NODES];
};

struct CUgraphExec_st {
    uint32_t magic;
    unsigned n;
    struct sim_work nodes[SIM_GRAPH_NODES];
};

struct sim_capture {
    struct CUgraph_st *graph;
    CUstreamCaptureMode mode;
    pthread_t thread;        /* began it: ends it unless the mode is relaxed */
    cuuint64_t id;           /* unique over the process's life */
    bool invalidated;        /* a call the capture could not hold came: ending it fails */
    CUgraphNode last;        /* cuStreamGetCaptureInfo's array of dependencies */
};

static cuuint64_t next_capture_id = 1;

static bool valid_graph(CUgraph g)
{
    return g && __atomic_load_n(&g->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC_GRAPH;
}

static bool valid_exec(CUgraphExec e)
{
    return e && __atomic_load_n(&e->magic, __ATOMIC_ACQUIRE) == SIM_MAGIC_GRAPH_EXEC;
}

static struct CUgraph_st *graph_new(void)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (g)
        g->magic = SIM_MAGIC_GRAPH;
    return g;
}

static void graph_free(struct CUgraph_st *g)
{
    if (!g)
        return;
    __atomic_store_n(&g->magic, SIM_MAGIC_DEAD, __ATOMIC_RELEASE);
    free(g);
}

static CUresult graph_add(struct CUgraph_st *g, const struct sim_work *w, CUgraphNode *node)
{
    if (g->n == SIM_GRAPH_NODES)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->nodes[g->n] = *w;
    g->handles[g->n].index = g->n;
    if (node)
        *node = &g->handles[g->n];
    g->n++;
    return CUDA_SUCCESS;
}

/* ---- graphs built by hand: kernel nodes ------------------------------------------------ */

static CUresult graph_create(CUgraph *graph, unsigned int flags)
{
    CHECK_INIT();
    if (!graph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *graph = graph_new();
    return *graph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    SIM_GATED(graph_create(phGraph, flags));
}

static CUresult graph_add_kernel(CUgraphNode *node, CUgraph graph, CUfunction f, const unsigned int grid[3],
                                 const unsigned int block[3], void **params, void **extra)
{
    CHECK_INIT();
    if (!node || !graph)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_graph(graph) || !sim_valid_function(f))
        return CUDA_ERROR_INVALID_HANDLE;
    struct sim_work w;
    memset(&w, 0, sizeof w);
    w.kind = SIM_WORK_KERNEL;
    struct sim_kernel_args *k = &w.u.kernel;
    snprintf(k->name, sizeof k->name, "%s", f->name);
    for (int i = 0; i < 3; i++) {
        if (!grid[i] || !block[i])
            return CUDA_ERROR_INVALID_VALUE;
        k->grid[i] = grid[i];
        k->block[i] = block[i];
    }
    CUresult rc = sim_read_kernel_args(params, extra, k); /* the values now, as CUDA copies them */
    return rc == CUDA_SUCCESS ? graph_add(graph, &w, node) : rc;
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    (void)dependencies, (void)numDependencies;
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    const CUDA_KERNEL_NODE_PARAMS *p = nodeParams;
    const unsigned int grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const unsigned int block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    SIM_GATED(graph_add_kernel(phGraphNode, hGraph, p->func, grid, block, p->kernelParams, p->extra));
}

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    (void)dependencies, (void)numDependencies;
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    const CUDA_KERNEL_NODE_PARAMS_v1 *p = nodeParams;
    const unsigned int grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const unsigned int block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    SIM_GATED(graph_add_kernel(phGraphNode, hGraph, p->func, grid, block, p->kernelParams, p->extra));
}

static CUresult graph_get_nodes(CUgraph graph, CUgraphNode *nodes, size_t *count)
{
    CHECK_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_graph(graph))
        return CUDA_ERROR_INVALID_HANDLE;
    if (nodes)
        for (size_t i = 0; i < *count && i < graph->n; i++)
            nodes[i] = &graph->handles[i];
    *count = graph->n;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    SIM_GATED(graph_get_nodes(hGraph, nodes, numNodes));
}

/* ---- instantiation and launch -------------------------------------------------------- */

static CUresult graph_instantiate(CUgraphExec *exec, CUgraph graph)
{
    CHECK_INIT();
    if (!exec)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_graph(graph))
        return CUDA_ERROR_INVALID_HANDLE;
    struct CUgraphExec_st *e = malloc(sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = SIM_MAGIC_GRAPH_EXEC;
    e->n = graph->n;
    memcpy(e->nodes, graph->nodes, graph->n * sizeof graph->nodes[0]);
    *exec = e;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    (void)flags; /* auto-free, upload, device launch, priority: nothing here they change */
    SIM_GATED(graph_instantiate(phGraphExec, hGraph));
}

/* Launching a graph into a stream that is capturing is refused and
 * invalidates the capture (the simulator does not nest graphs). */
static CUresult graph_launch(CUgraphExec exec, CUstream stream)
{
    CHECK_INIT();
    if (!valid_exec(exec))
        return CUDA_ERROR_INVALID_HANDLE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&s->mu);
    if (s->capture)
        rc = sim_capture_refuse(s->capture);
    pthread_mutex_unlock(&s->mu);
    for (unsigned i = 0; rc == CUDA_SUCCESS && i < exec->n; i++)
        rc = sim_enqueue_work(s, &exec->nodes[i]);
    return rc;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_GATED(graph_launch(hGraphExec, hStream));
}

/* Queued nodes are copies: destroying the executable graph behind its
 * launches is allowed, as on the driver. */
static CUresult graph_exec_destroy(CUgraphExec exec)
{
    CHECK_INIT();
    if (!valid_exec(exec))
        return CUDA_ERROR_INVALID_HANDLE;
    __atomic_store_n(&exec->magic, SIM_MAGIC_DEAD, __ATOMIC_RELEASE);
    free(exec);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    SIM_GATED(graph_exec_destroy(hGraphExec));
}

static CUresult graph_destroy(CUgraph graph)
{
    CHECK_INIT();
    if (!valid_graph(graph))
        return CUDA_ERROR_INVALID_HANDLE;
    graph_free(graph);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    SIM_GATED(graph_destroy(hGraph));
}

/* ---- stream capture --------------------------------------------------------------------- */

CUresult sim_capture_record(struct sim_capture *c, const struct sim_work *w)
{
    if (c->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    switch (w->kind) {
    case SIM_WORK_KERNEL:
    case SIM_WORK_COPY:
    case SIM_WORK_MEMSET:
    case SIM_WORK_HOST_FUNC: {
        CUresult rc = graph_add(c->graph, w, NULL);
        c->invalidated = rc != CUDA_SUCCESS;
        return rc;
    }
    default:
        /* events across streams (fork and join) and stream callbacks */
        return sim_capture_refuse(c);
    }
}

CUresult sim_capture_refuse(struct sim_capture *c)
{
    c->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

void sim_capture_free(struct sim_capture *c)
{
    if (!c)
        return;
    graph_free(c->graph);
    free(c);
}

/* The default streams cannot be captured: the legacy one never (the driver's
 * rule), and the simulator's per-thread stream is the same stream. */
static CUresult begin_capture(CUstream stream, CUstreamCaptureMode mode)
{
    CHECK_INIT();
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (s == s->ctx->null_stream)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct sim_capture *c = calloc(1, sizeof *c);
    if (c)
        c->graph = graph_new();
    if (!c || !c->graph) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->mode = mode;
    c->thread = pthread_self();
    c->id = __atomic_fetch_add(&next_capture_id, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&s->mu);
    bool already = s->capture != NULL;
    if (!already)
        s->capture = c;
    pthread_mutex_unlock(&s->mu);
    if (already) {
        sim_capture_free(c);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    SIM_GATED(begin_capture(hStream, mode));
}

/* Ending a capture the stream never began answers
 * CUDA_ERROR_STREAM_CAPTURE_UNMATCHED ("the capture was not initiated in
 * this stream"); an invalidated one ends with no graph. */
static CUresult end_capture(CUstream stream, CUgraph *graph)
{
    CHECK_INIT();
    if (!graph)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&s->mu);
    struct sim_capture *c = s->capture;
    if (!c)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    else if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->thread, pthread_self()))
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    else
        s->capture = NULL;
    pthread_mutex_unlock(&s->mu);
    if (rc != CUDA_SUCCESS)
        return rc;
    *graph = c->invalidated ? NULL : c->graph;
    if (c->invalidated)
        graph_free(c->graph);
    rc = c->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
    free(c);
    return rc;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    SIM_GATED(end_capture(hStream, phGraph));
}

struct capture_info {
    CUstreamCaptureStatus status;
    cuuint64_t id;
    CUgraph graph;
    const CUgraphNode *deps; /* the last node captured: the next depends on it */
    size_t ndeps;
};

static CUresult capture_info(CUstream stream, struct capture_info *info)
{
    CHECK_INIT();
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(stream, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    memset(info, 0, sizeof *info);
    pthread_mutex_lock(&s->mu);
    struct sim_capture *c = s->capture;
    info->status = !c ? CU_STREAM_CAPTURE_STATUS_NONE
                   : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                    : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (c && !c->invalidated) {
        info->id = c->id;
        info->graph = c->graph;
        info->ndeps = c->graph->n ? 1 : 0;
        c->last = c->graph->n ? &c->graph->handles[c->graph->n - 1] : NULL;
        info->deps = c->graph->n ? &c->last : NULL;
    }
    pthread_mutex_unlock(&s->mu);
    return CUDA_SUCCESS;
}

static CUresult is_capturing(CUstream stream, CUstreamCaptureStatus *status)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    struct capture_info info;
    CUresult rc = capture_info(stream, &info);
    if (rc == CUDA_SUCCESS)
        *status = info.status;
    return rc;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    SIM_GATED(is_capturing(hStream, captureStatus));
}

static CUresult get_capture_info(CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                                 const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    if (!status || (edges && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    struct capture_info info;
    CUresult rc = capture_info(stream, &info);
    if (rc != CUDA_SUCCESS)
        return rc;
    *status = info.status;
    if (id)
        *id = info.id;
    if (graph)
        *graph = info.graph;
    if (deps)
        *deps = info.deps;
    if (edges)
        *edges = NULL; /* no edge carries data */
    if (ndeps)
        *ndeps = info.ndeps;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out, const CUgraphEdgeData **edgeData_out,
                                           size_t *numDependencies_out)
{
    SIM_GATED(get_capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                               numDependencies_out));
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
    SIM_GATED(get_capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                               numDependencies_out));
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out)
{
    SIM_GATED(get_capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL));
}
