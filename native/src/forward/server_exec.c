/*
 * Executing forwarded requests against the real (or simulated) driver, and
 * putting the context back after each command.
 *
 * A server serves one command after another, so nothing a command sends is
 * believed: every handle and device pointer is checked against what this
 * server gave the command (the state below, kept here, never read back from
 * the command's segment), and what the command's memory held is zeroed
 * before the next command could be given it.
 *
 * - Handles (contexts, modules, functions, streams, events, graphs and
 *   executable graphs) are used only if
 *   the server gave them to this command (streams: or a default stream);
 *   another is CUDA_ERROR_INVALID_HANDLE (a context: the segment fails).
 * - Device memory: each allocation (base, size) and each module global the
 *   command asked for is a region of the command's. A copy or memset whose
 *   device range is not inside one region is CUDA_ERROR_INVALID_VALUE, and
 *   the driver never sees it. Kernel arguments are values whose meaning only
 *   the kernel's code knows: they cannot be checked, so what a kernel could
 *   reach of an earlier command must already be zero (below).
 * - An allocation is zeroed when it is made (the driver may hand out memory
 *   an earlier command used) and before it is freed, by the command or after
 *   it; module globals are zeroed before their module is unloaded.
 *
 * After the command the server synchronises every context it used, zeroes
 * and frees what is left, destroys the rest and synchronises again. A
 * context in an error state, or a driver call that fails while cleaning,
 * retires the process (the pool replaces it; its memory goes with it).
 */
#include "server.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "krex_simcuda.h"

/* ---- the driver's entry points ------------------------------------------------ */

#define FNS(X)                                                                                              \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName)                   \
    X(cuDeviceGetAttribute) X(cuDeviceTotalMem_v2) X(cuDeviceGetUuid_v2) X(cuDevicePrimaryCtxRetain)        \
    X(cuDevicePrimaryCtxRelease_v2) X(cuDevicePrimaryCtxGetState) X(cuCtxCreate_v2) X(cuCtxDestroy_v2)      \
    X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuCtxGetDevice) X(cuMemGetInfo_v2) X(cuMemAlloc_v2)           \
    X(cuMemFree_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyHtoDAsync_v2)                      \
    X(cuMemcpyHtoDAsync_v2_ptsz) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoHAsync_v2)        \
    X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoD_v2) X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyDtoDAsync_v2)        \
    X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) X(cuMemsetD16_v2)                  \
    X(cuMemsetD16_v2_ptds) X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds) X(cuMemsetD8Async)                      \
    X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async) X(cuMemsetD16Async_ptsz) X(cuMemsetD32Async)               \
    X(cuMemsetD32Async_ptsz) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                  \
    X(cuModuleGetGlobal_v2) X(cuFuncGetParamInfo) X(cuFuncGetAttribute) X(cuFuncSetAttribute)              \
    X(cuFuncIsLoaded) X(cuFuncLoad) X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx)           \
    X(cuLaunchKernelEx_ptsz) X(cuLaunchHostFunc) X(cuLaunchHostFunc_ptsz) X(cuStreamCreateWithPriority)    \
    X(cuStreamDestroy_v2) X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz) X(cuStreamQuery)              \
    X(cuStreamQuery_ptsz) X(cuStreamWaitEvent) X(cuStreamWaitEvent_ptsz) X(cuEventCreate)                  \
    X(cuEventDestroy_v2) X(cuEventRecordWithFlags) X(cuEventRecordWithFlags_ptsz) X(cuEventSynchronize)    \
    X(cuEventQuery) X(cuEventElapsedTime_v2) X(cuModuleGetLoadingMode) X(cuGetErrorName)                 \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) X(cuOccupancyMaxPotentialBlockSizeWithFlags)    \
    X(cuOccupancyAvailableDynamicSMemPerBlock) X(cuMemHostRegister_v2) X(cuMemHostUnregister)             \
    X(cuStreamBeginCapture_v2) X(cuStreamBeginCapture_v2_ptsz) X(cuStreamEndCapture)                       \
    X(cuStreamEndCapture_ptsz) X(cuStreamIsCapturing) X(cuStreamIsCapturing_ptsz)                           \
    X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphLaunch_ptsz) X(cuGraphExecDestroy)             \
    X(cuGraphDestroy)

#define DECLARE(name) static __typeof__(&name) p_##name;
FNS(DECLARE)
#undef DECLARE

#define PICK(flag, plain, pt) ((flag) ? (pt) : (plain))
#define CALL(fn, ...) ((fn) != NULL ? (fn)(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

static void *driver;
static CUdevice device;
static CUcontext primary;
static CUstream zero_stream; /* the server's own, in its primary context: new allocations are zeroed on it */
static void (*sim_set_tenant)(int32_t);

/* ---- what the current command created ------------------------------------------ */

struct handles {
    uint64_t *v;
    CUcontext *ctx; /* the context each was made in (current then) */
    size_t n, cap;
};
static struct handles modules, streams, events, contexts, graphs, graph_execs;
static long primary_retains; /* the command's retains minus its releases */
static CUcontext current;    /* the server thread's current context */

/* Device memory the command may reach: its allocations and the module
 * globals it asked for. */
struct region {
    uint64_t base, size;
    CUcontext ctx;   /* current when it was made */
    uint64_t module; /* 0: an allocation; else the module whose global it is */
};
static struct {
    struct region *v;
    size_t n, cap;
} regions;

/* Functions the command got, and of which module. */
static struct {
    struct {
        uint64_t f, module;
    } *v;
    size_t n, cap;
} functions;

static bool remember(struct handles *h, uint64_t x)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        uint64_t *v = realloc(h->v, cap * sizeof *v);
        if (v == NULL)
            return false;
        h->v = v;
        CUcontext *c = realloc(h->ctx, cap * sizeof *c);
        if (c == NULL)
            return false;
        h->ctx = c;
        h->cap = cap;
    }
    h->v[h->n] = x;
    h->ctx[h->n++] = current;
    return true;
}

static void drop(struct handles *h, size_t i)
{
    h->n--;
    h->v[i] = h->v[h->n];
    h->ctx[i] = h->ctx[h->n];
}

static bool forget(struct handles *h, uint64_t x)
{
    for (size_t i = h->n; i-- > 0;)
        if (h->v[i] == x) {
            drop(h, i);
            return true;
        }
    return false;
}

static bool known(const struct handles *h, uint64_t x)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->v[i] == x)
            return true;
    return false;
}

static bool add_region(uint64_t base, uint64_t size, uint64_t module)
{
    for (size_t i = 0; i < regions.n; i++)
        if (regions.v[i].base == base && regions.v[i].module == module)
            return true; /* a global asked for twice */
    if (regions.n == regions.cap) {
        size_t cap = regions.cap ? 2 * regions.cap : 64;
        struct region *v = realloc(regions.v, cap * sizeof *v);
        if (v == NULL)
            return false;
        regions.v = v;
        regions.cap = cap;
    }
    regions.v[regions.n++] = (struct region){base, size, current, module};
    return true;
}

/* The command's allocation that starts at `base` (its index), or -1. */
static long allocation_at(uint64_t base)
{
    for (size_t i = 0; i < regions.n; i++)
        if (regions.v[i].module == 0 && regions.v[i].base == base)
            return (long)i;
    return -1;
}

/* [p, p + n) lies inside one region of the command's. */
static bool owned(uint64_t p, uint64_t n)
{
    if (n == 0)
        return true; /* nothing moves */
    for (size_t i = 0; i < regions.n; i++) {
        const struct region *r = &regions.v[i];
        if (p >= r->base && p - r->base <= r->size && n <= r->size - (p - r->base))
            return true;
    }
    return false;
}

static bool add_function(uint64_t f, uint64_t module)
{
    for (size_t i = 0; i < functions.n; i++)
        if (functions.v[i].f == f)
            return true;
    if (functions.n == functions.cap) {
        size_t cap = functions.cap ? 2 * functions.cap : 64;
        __typeof__(functions.v) v = realloc(functions.v, cap * sizeof *v);
        if (v == NULL)
            return false;
        functions.v = v;
        functions.cap = cap;
    }
    functions.v[functions.n].f = f;
    functions.v[functions.n++].module = module;
    return true;
}

static bool known_function(uint64_t f)
{
    for (size_t i = 0; i < functions.n; i++)
        if (functions.v[i].f == f)
            return true;
    return false;
}

/* The default streams, or one the command created. */
static bool known_stream(uint64_t s)
{
    return s == 0 || s == (uint64_t)(uintptr_t)CU_STREAM_LEGACY || s == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD ||
           known(&streams, s);
}

static CUresult make_current(CUcontext c)
{
    if (c == current)
        return CUDA_SUCCESS;
    CUresult r = p_cuCtxSetCurrent(c);
    if (r == CUDA_SUCCESS)
        current = c;
    return r;
}

/* A new allocation zeroed before the command gets it, without waiting for
 * what the command already runs. */
static CUresult zero_new(CUdeviceptr d, size_t n)
{
    CUresult r;
    if (current == primary && zero_stream != NULL && p_cuMemsetD8Async != NULL && p_cuStreamSynchronize != NULL) {
        r = p_cuMemsetD8Async(d, 0, n, zero_stream);
        return r == CUDA_SUCCESS ? p_cuStreamSynchronize(zero_stream) : r;
    }
    r = CALL(p_cuMemsetD8_v2, d, 0, n);
    return r == CUDA_SUCCESS ? p_cuCtxSynchronize() : r;
}

/* Zeroes a region in its own context (after what runs there: a kernel of a
 * stream that does not wait for the default one could still write to it);
 * an allocation is then freed. Removes it from the command's regions. */
static CUresult zero_region(size_t i, bool free_it)
{
    struct region r = regions.v[i];
    regions.v[i] = regions.v[--regions.n];
    CUresult rc = make_current(r.ctx);
    if (rc == CUDA_SUCCESS)
        rc = p_cuCtxSynchronize();
    if (rc == CUDA_SUCCESS && r.size > 0)
        rc = CALL(p_cuMemsetD8_v2, (CUdeviceptr)r.base, 0, (size_t)r.size);
    if (rc == CUDA_SUCCESS)
        rc = p_cuCtxSynchronize();
    if (free_it) {
        CUresult freed = CALL(p_cuMemFree_v2, (CUdeviceptr)r.base);
        if (rc == CUDA_SUCCESS)
            rc = freed;
    }
    return rc;
}

/* Zeroes (and forgets) the module's globals and forgets its functions, before it is unloaded. */
static CUresult forget_module(uint64_t module)
{
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = regions.n; i-- > 0;)
        if (regions.v[i].module == module) {
            CUresult z = zero_region(i, false);
            if (rc == CUDA_SUCCESS)
                rc = z;
        }
    for (size_t i = functions.n; i-- > 0;)
        if (functions.v[i].module == module)
            functions.v[i] = functions.v[--functions.n];
    return rc;
}

/* Before a context of the command's is destroyed. */
static void forget_context(CUcontext c)
{
    for (size_t i = modules.n; i-- > 0;)
        if (modules.ctx[i] == c) {
            forget_module(modules.v[i]);
            drop(&modules, i);
        }
    for (size_t i = regions.n; i-- > 0;)
        if (i < regions.n && regions.v[i].ctx == c)
            zero_region(i, regions.v[i].module == 0);
    for (size_t i = streams.n; i-- > 0;)
        if (streams.ctx[i] == c)
            drop(&streams, i);
    for (size_t i = events.n; i-- > 0;)
        if (events.ctx[i] == c)
            drop(&events, i);
    for (size_t i = graph_execs.n; i-- > 0;)
        if (graph_execs.ctx[i] == c)
            drop(&graph_execs, i);
}

static bool known_context(uint64_t c)
{
    if (c == 0 || c == (uint64_t)(uintptr_t)primary)
        return true;
    for (size_t i = 0; i < contexts.n; i++)
        if (contexts.v[i] == c)
            return true;
    return false;
}

static const char *error_name(CUresult r)
{
    const char *s = NULL;
    if (p_cuGetErrorName == NULL || p_cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL)
        return "an unknown error";
    return s;
}

bool srv_driver_open(char *err, size_t errlen)
{
    driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver == NULL) {
        snprintf(err, errlen, "cannot load libcuda.so.1: %s", dlerror());
        return false;
    }
#define RESOLVE(name) p_##name = (__typeof__(p_##name))dlsym(driver, #name);
    FNS(RESOLVE)
#undef RESOLVE
    sim_set_tenant = (void (*)(int32_t))dlsym(driver, "krex_sim_set_tenant");
    if (p_cuInit == NULL || p_cuDeviceGet == NULL || p_cuDevicePrimaryCtxRetain == NULL ||
        p_cuCtxSetCurrent == NULL || p_cuCtxSynchronize == NULL || p_cuMemGetInfo_v2 == NULL) {
        snprintf(err, errlen, "the driver lacks an entry point the server needs");
        return false;
    }
    CUresult r = p_cuInit(0);
    if (r == CUDA_SUCCESS)
        r = p_cuDeviceGet(&device, 0);
    if (r == CUDA_SUCCESS)
        r = p_cuDevicePrimaryCtxRetain(&primary, device);
    if (r == CUDA_SUCCESS)
        r = p_cuCtxSetCurrent(primary);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "cannot create its context: %s", error_name(r));
        return false;
    }
    current = primary;
    /* Waiting for a zeroing on a stream of its own waits for nothing of the
     * command's (none: a synchronous memset and the context's end instead). */
    if (p_cuStreamCreateWithPriority == NULL ||
        p_cuStreamCreateWithPriority(&zero_stream, CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS)
        zero_stream = NULL;
    return true;
}

void srv_set_tenant(int tenant_id)
{
    if (sim_set_tenant != NULL)
        sim_set_tenant(tenant_id);
}

/* ---- one request ---------------------------------------------------------------- */

static void reply(struct fwd_segment *seg, CUresult r, const uint64_t *out, unsigned nout, uint32_t len)
{
    struct krex_fwd_header *h = seg->h;
    memset(h->reply_out, 0, sizeof h->reply_out);
    if (nout)
        memcpy(h->reply_out, out, nout * sizeof out[0]);
    h->reply_len = len;
    h->reply_result = (int32_t)r;
    __atomic_fetch_add(&h->reply_seq, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&h->client_parked, __ATOMIC_SEQ_CST))
        fwd_futex_wake(&h->reply_seq);
}

static void defer(struct fwd_segment *seg, unsigned op, CUresult r)
{
    struct krex_fwd_header *h = seg->h;
    if (r == CUDA_SUCCESS || __atomic_load_n(&h->deferred_result, __ATOMIC_ACQUIRE) != 0)
        return;
    snprintf(h->deferred_call, sizeof h->deferred_call, "%s", fwd_op_name(op));
    __atomic_store_n(&h->deferred_result, (uint32_t)r, __ATOMIC_RELEASE);
}

#define BAD(...)                                                                                            \
    do {                                                                                                    \
        snprintf(err, errlen, __VA_ARGS__);                                                                 \
        return false;                                                                                       \
    } while (0)

/* One request being executed: what it carries, and what its reply will. */
struct request {
    struct fwd_segment *seg;
    const struct krex_fwd_msg *m;
    const uint64_t *a; /* m->args */
    const uint8_t *blob;
    bool pt;        /* a per-thread-stream entry point */
    size_t staging; /* the server's own copy: the header is the command's to rewrite */
    uint64_t out[KREX_FWD_MAX_OUT];
    unsigned nout;
    uint32_t len;   /* bytes staged for the reply */
    bool malformed; /* the request breaks the protocol: err says how, the segment fails */
    char *err;
    size_t errlen;
};
typedef CUresult (*request_op)(struct request *q);

/* A request that breaks the protocol (not a driver error): no reply, the segment fails. */
#define MALFORMED(...)                                                                                      \
    do {                                                                                                    \
        snprintf(q->err, q->errlen, __VA_ARGS__);                                                           \
        q->malformed = true;                                                                                \
        return CUDA_ERROR_INVALID_VALUE;                                                                    \
    } while (0)

static void free_host_copy(void *p)
{
    free(p);
}

/* Rebuilds kernelParams (or `extra`) from the parameter blob, pointing into it. */
static bool unpack_params(const uint8_t *b, size_t len, void ***params, void ***extra, void **extra_store,
                          size_t *extra_size, char *err, size_t errlen)
{
    *params = NULL;
    *extra = NULL;
    if (len < 8)
        BAD("a launch without its parameter header");
    uint32_t head[2];
    memcpy(head, b, 8);
    if (head[1] == 0)
        return true;
    if (head[1] == 2) {
        if (head[0] != len - 8)
            BAD("a launch whose parameter buffer is %u bytes in a blob of %zu", head[0], len);
        *extra_size = head[0];
        extra_store[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
        extra_store[1] = (void *)(b + 8);
        extra_store[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
        extra_store[3] = extra_size;
        extra_store[4] = CU_LAUNCH_PARAM_END;
        *extra = extra_store;
        return true;
    }
    if (head[1] != 1 || head[0] > 4096)
        BAD("a launch with a parameter header it cannot read (mode %u, %u parameters)", head[1], head[0]);
    void **p = calloc(head[0] ? head[0] : 1, sizeof *p);
    if (p == NULL)
        BAD("out of memory for %u kernel parameters", head[0]);
    size_t at = 8;
    for (uint32_t i = 0; i < head[0]; i++) {
        uint32_t word[2];
        if (at + 8 > len) {
            free(p);
            BAD("a launch whose parameter %u runs past its blob", i);
        }
        memcpy(word, b + at, 8);
        at += 8;
        uint32_t size = word[0] & 0x7fffffffu;
        if (at + fwd_round8(size) > len) {
            free(p);
            BAD("a launch whose parameter %u (%u bytes) runs past its blob", i, size);
        }
        p[i] = (word[0] & 0x80000000u) ? NULL : (void *)(b + at);
        at += fwd_round8(size);
    }
    *params = p;
    return true;
}

/* A launch of a function, on a stream, with attributes the command may use
 * (CUDA_SUCCESS), or the error that refuses it. Its parameters are values:
 * which of them are pointers only the kernel's code knows. */
static CUresult launch_refused(uint64_t f, uint64_t stream, const uint8_t *attrs, unsigned nattrs)
{
    if (!known_function(f) || !known_stream(stream))
        return CUDA_ERROR_INVALID_HANDLE;
    for (unsigned i = 0; i < nattrs; i++) {
        CUlaunchAttribute at;
        memcpy(&at, attrs + i * sizeof at, sizeof at);
        switch (at.id) {
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
            if (!known(&events, (uint64_t)(uintptr_t)at.value.programmaticEvent.event))
                return CUDA_ERROR_INVALID_HANDLE;
            break;
        case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
            if (!known(&events, (uint64_t)(uintptr_t)at.value.launchCompletionEvent.event))
                return CUDA_ERROR_INVALID_HANDLE;
            break;
        case CU_LAUNCH_ATTRIBUTE_IGNORE:
        case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: /* an address range as a cache hint, never dereferenced */
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
            break; /* values */
        default:
            return CUDA_ERROR_INVALID_VALUE; /* a graph node's, or one whose value this server cannot judge */
        }
    }
    return CUDA_SUCCESS;
}

static CUresult exec_launch(struct request *q)
{
    const uint64_t *a = q->a;
    uint64_t nattrs = a[9], plen = a[10];
    if (plen > q->m->blob_len || nattrs > 64 || plen + nattrs * sizeof(CUlaunchAttribute) != q->m->blob_len)
        MALFORMED("a launch whose sizes (%llu bytes of parameters, %llu attributes) do not match its %u-byte blob",
                  (unsigned long long)plen, (unsigned long long)nattrs, q->m->blob_len);
    void **params, **extra, *extra_store[5];
    size_t extra_size = 0;
    if (!unpack_params(q->blob, plen, &params, &extra, extra_store, &extra_size, q->err, q->errlen)) {
        q->malformed = true;
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUfunction f = (CUfunction)(uintptr_t)a[0];
    CUstream s = (CUstream)(uintptr_t)a[8];
    CUresult r = launch_refused(a[0], a[8], q->blob + plen, (unsigned)nattrs);
    if (r != CUDA_SUCCESS) {
        free(params);
        return r;
    }
    if (nattrs == 0) {
        r = CALL(PICK(q->pt, p_cuLaunchKernel, p_cuLaunchKernel_ptsz), f, (unsigned)a[1], (unsigned)a[2],
                 (unsigned)a[3], (unsigned)a[4], (unsigned)a[5], (unsigned)a[6], (unsigned)a[7], s, params, extra);
    } else {
        CUlaunchAttribute attrs[64];
        memcpy(attrs, q->blob + plen, nattrs * sizeof attrs[0]);
        CUlaunchConfig c = {(unsigned)a[1], (unsigned)a[2], (unsigned)a[3], (unsigned)a[4], (unsigned)a[5],
                            (unsigned)a[6], (unsigned)a[7], s, attrs, (unsigned)nattrs};
        r = CALL(PICK(q->pt, p_cuLaunchKernelEx, p_cuLaunchKernelEx_ptsz), &c, f, params, extra);
    }
    free(params);
    return r;
}

/* ---- devices and contexts: answers in the staging area, counted retains,
 * contexts that take what was made in them along ------------------------------- */

static CUresult exec_device_name(struct request *q)
{
    const uint64_t *a = q->a;
    if (a[0] == 0 || a[0] > q->staging || a[0] > 1 << 20)
        MALFORMED("cuDeviceGetName for %llu bytes (the staging area holds %zu)", (unsigned long long)a[0],
                  q->staging);
    q->len = (uint32_t)a[0];
    return CALL(p_cuDeviceGetName, (char *)q->seg->staging, (int)a[0], (CUdevice)a[1]);
}

static CUresult exec_device_uuid(struct request *q)
{
    q->len = sizeof(CUuuid);
    return CALL(p_cuDeviceGetUuid_v2, (CUuuid *)q->seg->staging, (CUdevice)q->a[0]);
}

static CUresult exec_primary_retain(struct request *q)
{
    CUcontext c = NULL;
    CUresult r = p_cuDevicePrimaryCtxRetain(&c, (CUdevice)q->a[0]);
    if (r == CUDA_SUCCESS)
        primary_retains++;
    q->out[0] = (uint64_t)(uintptr_t)c, q->nout = 1;
    return r;
}

static CUresult exec_primary_release(struct request *q)
{
    /* The server's own retain is never the command's to give back. */
    if (primary_retains <= 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = CALL(p_cuDevicePrimaryCtxRelease_v2, (CUdevice)q->a[0]);
    if (r == CUDA_SUCCESS)
        primary_retains--;
    return r;
}

static CUresult exec_ctx_create(struct request *q)
{
    CUcontext c = NULL;
    CUresult r = CALL(p_cuCtxCreate_v2, &c, (unsigned)q->a[0], (CUdevice)q->a[1]);
    if (r == CUDA_SUCCESS) {
        remember(&contexts, (uint64_t)(uintptr_t)c);
        current = c; /* the driver made it current */
    }
    q->out[0] = (uint64_t)(uintptr_t)c, q->nout = 1;
    return r;
}

static CUresult exec_ctx_destroy(struct request *q)
{
    if (!forget(&contexts, q->a[0]))
        return CUDA_ERROR_INVALID_CONTEXT; /* the primary context, or not the command's */
    /* What was made in it goes with it: its memory zeroed first, its
     * handles forgotten (the driver destroys them). */
    forget_context((CUcontext)(uintptr_t)q->a[0]);
    CUresult r = CALL(p_cuCtxDestroy_v2, (CUcontext)(uintptr_t)q->a[0]);
    p_cuCtxSetCurrent(primary);
    current = primary;
    return r;
}

static CUresult exec_ctx_sync(struct request *q)
{
    uint64_t c = q->a[0];
    if (c != 0 && !known_context(c))
        MALFORMED("cuCtxSynchronize of context %#llx, which this server did not give the command",
                  (unsigned long long)c);
    CUresult r = c != 0 ? make_current((CUcontext)(uintptr_t)c) : CUDA_SUCCESS;
    return r == CUDA_SUCCESS ? p_cuCtxSynchronize() : r;
}

/* ---- memory: allocations are regions, copies and memsets stay inside them ------ */

static CUresult exec_mem_alloc(struct request *q)
{
    /* Zeroed before the command sees it: the driver may hand out
     * memory an earlier command (or a module's globals) used. */
    CUdeviceptr d = 0;
    CUresult r = CALL(p_cuMemAlloc_v2, &d, (size_t)q->a[0]);
    if (r == CUDA_SUCCESS)
        r = zero_new(d, (size_t)q->a[0]);
    if (r == CUDA_SUCCESS && !add_region(d, q->a[0], 0))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS && d != 0) {
        CALL(p_cuMemFree_v2, d);
        d = 0;
    }
    q->out[0] = d, q->nout = 1;
    return r;
}

static CUresult exec_mem_free(struct request *q)
{
    if (q->a[0] == 0)
        return CUDA_SUCCESS; /* as the driver: freeing NULL does nothing */
    long i = allocation_at(q->a[0]);
    if (i < 0)
        return CUDA_ERROR_INVALID_VALUE; /* not an allocation of the command's */
    return zero_region((size_t)i, true);
}

/* A copy from or to the command's host memory cannot be a node of a graph:
 * the bytes the server holds for it are gone when the graph runs again.
 * While the stream captures, the server asks for what the driver refuses
 * during a capture, the stream's synchronisation: the capture is
 * invalidated and the copy fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
 * as a call the driver cannot capture does. (Copies from or to the pinned
 * arena are captured: the server's mapping of it outlives the command's
 * graphs.) */
static bool refused_while_capturing(CUstream s, bool pt, CUresult *r)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (CALL(PICK(pt, p_cuStreamIsCapturing, p_cuStreamIsCapturing_ptsz), s, &status) != CUDA_SUCCESS ||
        status == CU_STREAM_CAPTURE_STATUS_NONE)
        return false;
    *r = CALL(PICK(pt, p_cuStreamSynchronize, p_cuStreamSynchronize_ptsz), s);
    if (*r == CUDA_SUCCESS)
        *r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return true;
}

/* The bytes came with the request. The asynchronous form's copy may run
 * after the ring has moved on: it reads a copy of them that a host function
 * frees once the stream has passed it. */
static CUresult exec_htod(struct request *q)
{
    const uint64_t *a = q->a;
    if (a[1] != q->m->blob_len)
        MALFORMED("a copy to the device of %llu bytes carrying %u", (unsigned long long)a[1], q->m->blob_len);
    if (!owned(a[0], a[1]))
        return CUDA_ERROR_INVALID_VALUE;
    if (q->m->op == KREX_FWD_OP_HTOD)
        return CALL(PICK(q->pt, p_cuMemcpyHtoD_v2, p_cuMemcpyHtoD_v2_ptds), (CUdeviceptr)a[0], q->blob,
                    (size_t)a[1]);
    if (!known_stream(a[2]))
        return CUDA_ERROR_INVALID_HANDLE;
    CUstream s = (CUstream)(uintptr_t)a[2];
    CUresult r;
    if (refused_while_capturing(s, q->pt, &r))
        return r;
    void *copy = malloc(a[1] ? a[1] : 1);
    if (copy == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(copy, q->blob, a[1]);
    r = CALL(PICK(q->pt, p_cuMemcpyHtoDAsync_v2, p_cuMemcpyHtoDAsync_v2_ptsz), (CUdeviceptr)a[0], copy,
                      (size_t)a[1], s);
    if (r == CUDA_SUCCESS)
        return CALL(PICK(q->pt, p_cuLaunchHostFunc, p_cuLaunchHostFunc_ptsz), s, free_host_copy, copy);
    free(copy);
    return r;
}

/* Both forms answer with the bytes; the asynchronous one waits for its
 * stream, so they are there when the reply is. */
static CUresult exec_dtoh(struct request *q)
{
    const uint64_t *a = q->a;
    bool async = q->m->op == KREX_FWD_OP_DTOH_ASYNC;
    if (a[1] > q->staging)
        MALFORMED("a copy to the host of %llu bytes (the staging area holds %zu)", (unsigned long long)a[1],
                  q->staging);
    if (!owned(a[0], a[1]))
        return CUDA_ERROR_INVALID_VALUE;
    if (async && !known_stream(a[2]))
        return CUDA_ERROR_INVALID_HANDLE;
    q->len = (uint32_t)a[1];
    if (!async)
        return CALL(PICK(q->pt, p_cuMemcpyDtoH_v2, p_cuMemcpyDtoH_v2_ptds), q->seg->staging, (CUdeviceptr)a[0],
                    (size_t)a[1]);
    CUstream s = (CUstream)(uintptr_t)a[2];
    CUresult r;
    if (refused_while_capturing(s, q->pt, &r))
        return r;
    r = CALL(PICK(q->pt, p_cuMemcpyDtoHAsync_v2, p_cuMemcpyDtoHAsync_v2_ptsz), q->seg->staging,
                      (CUdeviceptr)a[0], (size_t)a[1], s);
    return r == CUDA_SUCCESS ? CALL(PICK(q->pt, p_cuStreamSynchronize, p_cuStreamSynchronize_ptsz), s) : r;
}

/* One operation for the three element widths (a[3]): the width picks the
 * driver entry point and scales the range checked. */
static CUresult exec_memset(struct request *q)
{
    const uint64_t *a = q->a;
    bool pt = q->pt, async = q->m->op == KREX_FWD_OP_MEMSET_ASYNC;
    CUdeviceptr d = (CUdeviceptr)a[0];
    size_t n = (size_t)a[2];
    CUstream s = (CUstream)(uintptr_t)a[4];
    if ((a[3] == 1 || a[3] == 2 || a[3] == 4) && (a[2] > UINT64_MAX / a[3] || !owned(a[0], a[2] * a[3])))
        return CUDA_ERROR_INVALID_VALUE;
    if (async && !known_stream(a[4]))
        return CUDA_ERROR_INVALID_HANDLE;
    switch (a[3]) {
    case 1:
        return async ? CALL(PICK(pt, p_cuMemsetD8Async, p_cuMemsetD8Async_ptsz), d, (unsigned char)a[1], n, s)
                     : CALL(PICK(pt, p_cuMemsetD8_v2, p_cuMemsetD8_v2_ptds), d, (unsigned char)a[1], n);
    case 2:
        return async ? CALL(PICK(pt, p_cuMemsetD16Async, p_cuMemsetD16Async_ptsz), d, (unsigned short)a[1], n, s)
                     : CALL(PICK(pt, p_cuMemsetD16_v2, p_cuMemsetD16_v2_ptds), d, (unsigned short)a[1], n);
    case 4:
        return async ? CALL(PICK(pt, p_cuMemsetD32Async, p_cuMemsetD32Async_ptsz), d, (unsigned)a[1], n, s)
                     : CALL(PICK(pt, p_cuMemsetD32_v2, p_cuMemsetD32_v2_ptds), d, (unsigned)a[1], n);
    default:
        MALFORMED("a memset of %llu-byte elements", (unsigned long long)a[3]);
    }
}

/* ---- the pinned arena: ranges registered on the server's mapping ---------------- */

/* The command's arena as this server mapped it (server.c: the runtime's
 * size, fstat-checked), and the ranges of it registered with the driver.
 * Offsets and sizes come from the command: each is checked against these,
 * never against anything in the segment. */
static uint8_t *arena;
static uint64_t arena_size;
static struct {
    struct {
        uint64_t off, size;
    } *v;
    size_t n, cap;
} pinned;

void srv_set_arena(uint8_t *base, uint64_t size)
{
    arena = base;
    arena_size = size;
}

/* The registered range that holds [off, off + n), or -1. */
static long pinned_range(uint64_t off, uint64_t n)
{
    for (size_t i = 0; i < pinned.n; i++)
        if (off >= pinned.v[i].off && off - pinned.v[i].off <= pinned.v[i].size &&
            n <= pinned.v[i].size - (off - pinned.v[i].off))
            return (long)i;
    return -1;
}

/* Every context the command used has run what it was given (the primary
 * first, then its own): nothing queued can still reach a range. */
static CUresult sync_contexts(void)
{
    CUcontext was = current;
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i <= contexts.n && r == CUDA_SUCCESS; i++) {
        r = make_current(i == 0 ? primary : (CUcontext)(uintptr_t)contexts.v[i - 1]);
        if (r == CUDA_SUCCESS)
            r = p_cuCtxSynchronize();
    }
    CUresult back = make_current(was);
    return r != CUDA_SUCCESS ? r : back;
}

/* Registered portable: a copy in any context of the command's may use it. */
static CUresult exec_pinned_register(struct request *q)
{
    uint64_t off = q->a[0], n = q->a[1];
    if (arena == NULL)
        return CUDA_ERROR_NOT_SUPPORTED; /* no arena: the client keeps ordinary memory */
    if (n == 0 || off % KREX_FWD_PINNED_ALIGN != 0 || n % KREX_FWD_PINNED_ALIGN != 0 || off > arena_size ||
        n > arena_size - off)
        MALFORMED("a pinned range of %llu bytes at %llu (the arena holds %llu bytes, in pages)",
                  (unsigned long long)n, (unsigned long long)off, (unsigned long long)arena_size);
    for (size_t i = 0; i < pinned.n; i++)
        if (off < pinned.v[i].off + pinned.v[i].size && pinned.v[i].off < off + n)
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (pinned.n == pinned.cap) {
        size_t cap = pinned.cap ? 2 * pinned.cap : 64;
        __typeof__(pinned.v) v = realloc(pinned.v, cap * sizeof *v);
        if (v == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        pinned.v = v, pinned.cap = cap;
    }
    /* In the server's primary context, which outlives every context of the
     * command's: a registration goes with the context it was made in. */
    CUcontext was = current;
    CUresult r = make_current(primary);
    if (r == CUDA_SUCCESS)
        r = CALL(p_cuMemHostRegister_v2, arena + off, (size_t)n, CU_MEMHOSTREGISTER_PORTABLE);
    CUresult back = make_current(was);
    if (r == CUDA_SUCCESS && back != CUDA_SUCCESS) {
        CALL(p_cuMemHostUnregister, arena + off);
        r = back;
    }
    if (r == CUDA_SUCCESS) {
        pinned.v[pinned.n].off = off;
        pinned.v[pinned.n++].size = n;
    }
    return r;
}

/* In the primary context, where it was registered. */
static CUresult unregister_range(size_t i)
{
    CUcontext was = current;
    CUresult r = make_current(primary);
    if (r == CUDA_SUCCESS)
        r = CALL(p_cuMemHostUnregister, arena + pinned.v[i].off);
    pinned.v[i] = pinned.v[--pinned.n];
    CUresult back = make_current(was);
    return r != CUDA_SUCCESS ? r : back;
}

/* As the driver's cuMemFreeHost: after the work queued before it. */
static CUresult exec_pinned_unregister(struct request *q)
{
    long i = -1;
    for (size_t k = 0; k < pinned.n && i < 0; k++)
        if (pinned.v[k].off == q->a[0])
            i = (long)k;
    if (i < 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sync_contexts();
    return r == CUDA_SUCCESS ? unregister_range((size_t)i) : r;
}

/* One copy between the command's device memory and a registered range of
 * its arena, from this server's mapping of the same pages, on the command's
 * stream: a[0] the device pointer, a[1] the offset, a[2] the size, a[3] the
 * stream, a[4] 1 for the asynchronous form. */
static CUresult exec_pinned_copy(struct request *q)
{
    const uint64_t *a = q->a;
    bool to_device = q->m->op == KREX_FWD_OP_HTOD_PINNED, async = a[4] != 0;
    if (a[4] > 1)
        MALFORMED("a pinned copy with mode %llu", (unsigned long long)a[4]);
    if (pinned_range(a[1], a[2]) < 0 || !owned(a[0], a[2]))
        return CUDA_ERROR_INVALID_VALUE;
    if (async && !known_stream(a[3]))
        return CUDA_ERROR_INVALID_HANDLE;
    CUdeviceptr d = (CUdeviceptr)a[0];
    uint8_t *h = arena + a[1];
    size_t n = (size_t)a[2];
    CUstream s = (CUstream)(uintptr_t)a[3];
    if (to_device)
        return async ? CALL(PICK(q->pt, p_cuMemcpyHtoDAsync_v2, p_cuMemcpyHtoDAsync_v2_ptsz), d, h, n, s)
                     : CALL(PICK(q->pt, p_cuMemcpyHtoD_v2, p_cuMemcpyHtoD_v2_ptds), d, h, n);
    return async ? CALL(PICK(q->pt, p_cuMemcpyDtoHAsync_v2, p_cuMemcpyDtoHAsync_v2_ptsz), h, d, n, s)
                 : CALL(PICK(q->pt, p_cuMemcpyDtoH_v2, p_cuMemcpyDtoH_v2_ptds), h, d, n);
}

/* ---- modules and functions: images and names travel as blobs ------------------- */

static CUresult exec_module_load(struct request *q)
{
    if (q->m->blob_len == 0)
        MALFORMED("a module load without its image");
    CUmodule mod = NULL;
    CUresult r = CALL(p_cuModuleLoadData, &mod, q->blob);
    if (r == CUDA_SUCCESS && !remember(&modules, (uint64_t)(uintptr_t)mod)) {
        CALL(p_cuModuleUnload, mod);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    q->out[0] = r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)mod : 0, q->nout = 1;
    return r;
}

static CUresult exec_module_unload(struct request *q)
{
    if (!known(&modules, q->a[0]))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = forget_module(q->a[0]);
    if (r == CUDA_SUCCESS)
        r = CALL(p_cuModuleUnload, (CUmodule)(uintptr_t)q->a[0]);
    if (r == CUDA_SUCCESS)
        forget(&modules, q->a[0]);
    return r;
}

/* A function (which joins the command's) or a global (which becomes one of
 * its regions) of a module of the command's, by its NUL-terminated name. */
static CUresult exec_module_symbol(struct request *q)
{
    const uint64_t *a = q->a;
    const char *name = (const char *)q->blob;
    if (q->m->blob_len == 0 || q->blob[q->m->blob_len - 1] != '\0')
        MALFORMED("%s with a name that does not end in NUL", fwd_op_name(q->m->op));
    if (!known(&modules, a[0]))
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r;
    if (q->m->op == KREX_FWD_OP_MODULE_FUNCTION) {
        CUfunction f = NULL;
        r = CALL(p_cuModuleGetFunction, &f, (CUmodule)(uintptr_t)a[0], name);
        if (r == CUDA_SUCCESS && !add_function((uint64_t)(uintptr_t)f, a[0]))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        q->out[0] = r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)f : 0, q->nout = 1;
        return r;
    }
    CUdeviceptr d = 0;
    size_t n = 0;
    r = CALL(p_cuModuleGetGlobal_v2, &d, &n, (CUmodule)(uintptr_t)a[0], name);
    if (r == CUDA_SUCCESS && !add_region(d, n, a[0]))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    q->out[0] = r == CUDA_SUCCESS ? d : 0, q->out[1] = r == CUDA_SUCCESS ? n : 0, q->nout = 2;
    return r;
}

/* The layout, as (offset, size) pairs in the staging area, until the driver says no more. */
static CUresult exec_func_params(struct request *q)
{
    CUfunction f = (CUfunction)(uintptr_t)q->a[0];
    if (!known_function(q->a[0]))
        return CUDA_ERROR_INVALID_HANDLE;
    if (p_cuFuncGetParamInfo == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    uint32_t *pairs = (uint32_t *)q->seg->staging;
    size_t max = q->staging / (2 * sizeof(uint32_t));
    size_t i = 0;
    CUresult r = CUDA_SUCCESS;
    for (; i < max && i < 4096; i++) {
        size_t off = 0, size = 0;
        CUresult asked = p_cuFuncGetParamInfo(f, i, &off, &size);
        if (asked == CUDA_ERROR_INVALID_VALUE)
            break;
        if (asked != CUDA_SUCCESS) {
            r = asked;
            break;
        }
        pairs[2 * i] = (uint32_t)off;
        pairs[2 * i + 1] = (uint32_t)size;
    }
    q->out[0] = i, q->nout = 1;
    q->len = (uint32_t)(i * 2 * sizeof(uint32_t));
    return r;
}

/* Without a table: the driver's calculator. With one (the program's
 * callback, evaluated by the client for each multiple of the warp): the
 * largest block of the highest occupancy. */
static CUresult exec_occ_block_size(struct request *q)
{
    const uint64_t *a = q->a;
    CUfunction f = (CUfunction)(uintptr_t)a[0];
    int grid = 0, block = 0;
    CUresult r;
    if (q->m->blob_len != 0 && q->m->blob_len != 32 * sizeof(uint64_t))
        MALFORMED("an occupancy table of %u bytes", q->m->blob_len);
    if (!known_function(a[0])) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (q->m->blob_len == 0) {
        r = CALL(p_cuOccupancyMaxPotentialBlockSizeWithFlags, &grid, &block, f, NULL, (size_t)a[1], (int)a[2],
                 (unsigned)a[3]);
    } else {
        uint64_t table[32];
        memcpy(table, q->blob, sizeof table);
        int limit = 1024, sms = 0, most = 0, best_n = 0;
        if (p_cuFuncGetAttribute != NULL)
            p_cuFuncGetAttribute(&limit, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
        if ((int)a[2] > 0 && (int)a[2] < limit)
            limit = (int)a[2];
        r = CALL(p_cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
        for (int b = limit / 32 * 32; r == CUDA_SUCCESS && b > 0; b -= 32) {
            int n = 0;
            r = CALL(p_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, &n, f, b, (size_t)table[b / 32 - 1],
                     (unsigned)a[3]);
            if (r == CUDA_SUCCESS && n * b > most)
                most = n * b, block = b, best_n = n;
        }
        grid = best_n * sms;
    }
    q->out[0] = (uint64_t)(int64_t)grid, q->out[1] = (uint64_t)(int64_t)block, q->nout = 2;
    return r;
}

/* The one-shape operations, generated from tools/forward_ops.py with the
 * client's side of them: GENERATED_OPS. */
#include "server_ops_gen.inc"

/* Every operation's execution. Written by hand (above), each for a reason
 * the op table cannot say (tools/forward_ops.py, BY_HAND): bytes answered in
 * the staging area or carried in a blob, counted retains, contexts and
 * allocations with what goes with them, a memset's width. */
static const request_op operations[KREX_FWD_OP_COUNT] = {
    GENERATED_OPS
    [KREX_FWD_OP_DEVICE_NAME] = exec_device_name,
    [KREX_FWD_OP_DEVICE_UUID] = exec_device_uuid,
    [KREX_FWD_OP_PRIMARY_RETAIN] = exec_primary_retain,
    [KREX_FWD_OP_PRIMARY_RELEASE] = exec_primary_release,
    [KREX_FWD_OP_CTX_CREATE] = exec_ctx_create,
    [KREX_FWD_OP_CTX_DESTROY] = exec_ctx_destroy,
    [KREX_FWD_OP_CTX_SYNC] = exec_ctx_sync,
    [KREX_FWD_OP_MEM_ALLOC] = exec_mem_alloc,
    [KREX_FWD_OP_MEM_FREE] = exec_mem_free,
    [KREX_FWD_OP_HTOD] = exec_htod,
    [KREX_FWD_OP_HTOD_ASYNC] = exec_htod,
    [KREX_FWD_OP_DTOH] = exec_dtoh,
    [KREX_FWD_OP_DTOH_ASYNC] = exec_dtoh,
    [KREX_FWD_OP_MEMSET] = exec_memset,
    [KREX_FWD_OP_MEMSET_ASYNC] = exec_memset,
    [KREX_FWD_OP_MODULE_LOAD] = exec_module_load,
    [KREX_FWD_OP_MODULE_UNLOAD] = exec_module_unload,
    [KREX_FWD_OP_MODULE_FUNCTION] = exec_module_symbol,
    [KREX_FWD_OP_MODULE_GLOBAL] = exec_module_symbol,
    [KREX_FWD_OP_FUNC_PARAMS] = exec_func_params,
    [KREX_FWD_OP_OCC_BLOCK_SIZE] = exec_occ_block_size,
    [KREX_FWD_OP_LAUNCH] = exec_launch,
    [KREX_FWD_OP_PINNED_REGISTER] = exec_pinned_register,
    [KREX_FWD_OP_PINNED_UNREGISTER] = exec_pinned_unregister,
    [KREX_FWD_OP_HTOD_PINNED] = exec_pinned_copy,
    [KREX_FWD_OP_DTOH_PINNED] = exec_pinned_copy,
};

bool srv_execute(struct fwd_segment *seg, const struct krex_fwd_msg *m, const uint8_t *blob, char *err,
                 size_t errlen)
{
    struct request q = {
        .seg = seg,
        .m = m,
        .a = m->args,
        .blob = blob,
        .pt = (m->flags & KREX_FWD_PER_THREAD) != 0,
        .staging = seg->staging_size,
        .err = err,
        .errlen = errlen,
    };
    if (!known_context(m->ctx))
        BAD("a request (%s) in context %#llx, which this server did not give the command", fwd_op_name(m->op),
            (unsigned long long)m->ctx);
    if (m->op >= KREX_FWD_OP_COUNT || operations[m->op] == NULL)
        BAD("an unknown operation %u", (unsigned)m->op);
    CUresult r = make_current((CUcontext)(uintptr_t)m->ctx);
    if (r == CUDA_SUCCESS)
        r = operations[m->op](&q);
    if (q.malformed)
        return false;
    if (m->flags & KREX_FWD_WANT_REPLY)
        reply(seg, r, q.out, q.nout, r == CUDA_SUCCESS ? q.len : 0);
    else
        defer(seg, m->op, r);
    return true;
}

/* ---- after a command ---------------------------------------------------------------- */

#define CLEAN(call)                                                                                         \
    do {                                                                                                    \
        CUresult c_ = (call);                                                                               \
        if (c_ != CUDA_SUCCESS && ok) {                                                                     \
            snprintf(why, whylen, "%s failed while cleaning: %s", #call, error_name(c_));                   \
            ok = false;                                                                                     \
        }                                                                                                   \
    } while (0)

bool srv_reset(char *why, size_t whylen)
{
    bool ok = true;
    size_t n_left = regions.n + modules.n + streams.n + events.n + contexts.n + graphs.n + graph_execs.n;
    /* A capture the command left open ends first: its work never runs, and a
     * driver refuses to synchronise a context while one of its streams
     * captures. */
    for (size_t i = 0; i < streams.n; i++) {
        CUstream s = (CUstream)(uintptr_t)streams.v[i];
        CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
        CUgraph left = NULL;
        if (CALL(p_cuStreamIsCapturing, s, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE &&
            CALL(p_cuStreamEndCapture, s, &left) == CUDA_SUCCESS && left != NULL)
            CLEAN(CALL(p_cuGraphDestroy, left));
    }
    /* Everything the command sent has run (a kernel still writing would undo
     * the zeroing below); a context in an error state retires the process. */
    for (size_t i = 0; i <= contexts.n; i++) {
        CUcontext c = i < contexts.n ? (CUcontext)(uintptr_t)contexts.v[i] : primary;
        CUresult sync = make_current(c);
        if (sync == CUDA_SUCCESS)
            sync = p_cuCtxSynchronize();
        if (sync != CUDA_SUCCESS) {
            snprintf(why, whylen, "its context is in an error state after the command: %s", error_name(sync));
            return false;
        }
    }
    /* Its graphs go before their contexts (an executable graph is made in
     * one); nothing of theirs is queued now. */
    for (size_t i = 0; i < graph_execs.n; i++)
        CLEAN(CALL(p_cuGraphExecDestroy, (CUgraphExec)(uintptr_t)graph_execs.v[i]));
    for (size_t i = 0; i < graphs.n; i++)
        CLEAN(CALL(p_cuGraphDestroy, (CUgraph)(uintptr_t)graphs.v[i]));
    graph_execs.n = graphs.n = 0;
    /* Its arena's ranges are unregistered now that nothing queued can reach
     * them; the arena itself is unmapped by the caller and removed by the
     * runtime (a new file for each command: nothing of it is reused). */
    size_t n_pinned = pinned.n;
    while (pinned.n > 0)
        CLEAN(unregister_range(pinned.n - 1));
    /* Nothing the command wrote reaches the next one: its memory is zeroed,
     * then freed (module globals go with their modules). */
    while (regions.n > 0)
        CLEAN(zero_region(regions.n - 1, regions.v[regions.n - 1].module == 0));
    for (size_t i = 0; i < contexts.n; i++)
        CLEAN(CALL(p_cuCtxDestroy_v2, (CUcontext)(uintptr_t)contexts.v[i]));
    contexts.n = 0;
    p_cuCtxSetCurrent(primary);
    current = primary;
    for (size_t i = 0; i < events.n; i++)
        CLEAN(CALL(p_cuEventDestroy_v2, (CUevent)(uintptr_t)events.v[i]));
    for (size_t i = 0; i < streams.n; i++)
        CLEAN(CALL(p_cuStreamDestroy_v2, (CUstream)(uintptr_t)streams.v[i]));
    for (size_t i = 0; i < modules.n; i++)
        CLEAN(CALL(p_cuModuleUnload, (CUmodule)(uintptr_t)modules.v[i]));
    events.n = streams.n = modules.n = functions.n = 0;
    for (; primary_retains > 0; primary_retains--)
        CLEAN(CALL(p_cuDevicePrimaryCtxRelease_v2, device));
    primary_retains = 0;
    /* Host functions of asynchronous copies run on the driver's thread: they
     * finish before the next command. (Free device memory is not compared
     * with a baseline: other processes share the device; every allocation
     * the command made went through this server and was freed above.) */
    CLEAN(p_cuCtxSynchronize());
    if (ok && why != NULL && whylen > 0)
        snprintf(why, whylen, "zeroed and freed %zu handle(s) the command left, unregistered %zu pinned range(s)",
                 n_left, n_pinned);
    return ok;
}
