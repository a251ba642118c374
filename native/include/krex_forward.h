/*
 * krex_forward.h - the channel of forwarded mode: a command's driver calls,
 * sent to a context server of its GPU's pool over shared memory.
 *
 * One segment per command, made by the runtime (a file, its path in
 * KREX_FORWARD_RING for the command, its descriptor passed to the server):
 *
 *   [header: 4096 bytes][request ring: ring_size bytes][staging: staging_size bytes]
 *
 * The client (build/forward/libcuda.so.1, the command's "driver") writes
 * requests into the ring; the server (build/krex-ctxd) executes them in
 * order against the real driver. A request with KREX_FWD_WANT_REPLY is
 * answered in the header (result, up to 8 values) and the staging area
 * (bytes: a copy to the host, a name); the client holds its send lock from
 * the request to the reply, so at most one reply is outstanding. Requests
 * without it (launches, asynchronous copies from the host, event records,
 * stream waits) return to the program at once; a failure of one is kept
 * (deferred_*) and returned by the next call that waits for a reply.
 *
 * Waiting is spin-then-park on futex words of the header (shared, not
 * private: the other side is another process). A side that parks bounds its
 * sleep, so it notices a peer that died without waking it.
 *
 * A second file per command, the pinned arena (its path in KREX_FORWARD_PINNED,
 * its descriptor passed to the server with the segment, its size the
 * runtime's), holds the command's page-locked host memory: cuMemAllocHost and
 * cuMemHostAlloc hand out page-aligned ranges of it, and the server registers
 * each range of its own mapping with the driver (PINNED_REGISTER). A copy
 * whose host side lies in a registered range travels as an offset into the
 * arena (HTOD_PINNED, DTOH_PINNED): the server issues one copy from or to its
 * mapping of the same pages, on the command's stream.
 *
 * This header is a contract: krex_runtime/commands/forwarded/forward_ring.py makes the
 * segment and reads its state with the struct module; a test compares them.
 * Change the layout only together with KREX_FWD_VERSION.
 */
#ifndef KREX_FORWARD_H
#define KREX_FORWARD_H

#include <stdint.h>

#define KREX_FWD_MAGIC 0x31474e4952574b4bull /* "KKWRING1" little-endian */
#define KREX_FWD_VERSION 1u
#define KREX_FWD_HEADER_SIZE 4096u

/* The client's environment. */
#define KREX_FWD_ENV_RING "KREX_FORWARD_RING"         /* path of the command's segment */
#define KREX_FWD_ENV_FALLBACK "KREX_FORWARD_FALLBACK" /* "process": a call not forwarded ends the command */
/* Path of the command's pinned arena (below); unset or empty: none. */
#define KREX_FWD_ENV_PINNED "KREX_FORWARD_PINNED"
/* Exit status of a command ended by a call the forwarder does not know, when
 * KREX_FORWARD_FALLBACK=process (the runtime then runs it again in process mode). */
#define KREX_FWD_EXIT_UNKNOWN_CALL 86

/* server_state */
enum krex_fwd_state {
    KREX_FWD_STATE_NEW = 0,     /* made by the runtime, no server yet */
    KREX_FWD_STATE_SERVING = 1, /* a server executes requests */
    KREX_FWD_STATE_ENDED = 2,   /* the server stopped serving (the command ended) */
    KREX_FWD_STATE_FAILED = 3,  /* the server refused a request or died: reason says why */
};

/* Largest single request and the most a request may carry (a copy from the
 * host larger than that is sent in chunks). */
#define KREX_FWD_MAX_ARGS 12
#define KREX_FWD_MAX_OUT 8

struct krex_fwd_header {
    /* line 0: fixed by the runtime */
    uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t ring_size;    /* bytes, a power of two */
    uint64_t staging_size; /* bytes */
    uint32_t server_state; /* enum krex_fwd_state */
    int32_t server_pid;
    int32_t client_pid;    /* claimed by the first process of the command that calls the driver */
    uint32_t reserved0;
    uint64_t reserved1[2];
    /* line 1: the client's */
    uint64_t req_head;      /* bytes written into the ring, ever */
    uint32_t req_seq;       /* futex: bumped after each request */
    uint32_t client_parked; /* the client sleeps on space_seq or reply_seq */
    uint64_t calls_sent;
    uint64_t staged_pinned_copies; /* asynchronous copies from or to page-locked host memory, staged */
    uint32_t unknown_after_region; /* unknown_call came after the process had held a region */
    uint32_t reserved2a;
    uint64_t reserved2[3];
    /* line 2: the server's */
    uint64_t req_tail;      /* bytes consumed, ever */
    uint32_t space_seq;     /* futex: bumped after consuming */
    uint32_t server_parked; /* the server sleeps on req_seq */
    uint32_t reply_seq;     /* futex: bumped once a reply is complete */
    int32_t reply_result;   /* CUresult */
    uint32_t reply_len;     /* bytes in staging */
    uint32_t deferred_result; /* first failure of a request sent without waiting (0: none) */
    uint64_t calls_done;
    uint64_t reserved3[3];
    uint64_t reply_out[KREX_FWD_MAX_OUT];
    char deferred_call[64]; /* its name */
    char reason[256];       /* why the server stopped (state FAILED) */
    char unknown_call[64];  /* the first call the client does not forward */
};

/* One request in the ring, 8-byte aligned, followed by blob_len bytes. */
struct krex_fwd_msg {
    uint32_t size;     /* header + blob, rounded up to 8 */
    uint16_t op;       /* enum krex_fwd_op */
    uint16_t flags;    /* KREX_FWD_* below */
    uint64_t ctx;      /* the calling thread's current context (server handle), 0: none */
    uint32_t nargs;
    uint32_t blob_len;
    uint64_t seq;      /* the client's request number (diagnostics) */
    uint64_t args[KREX_FWD_MAX_ARGS];
};

#define KREX_FWD_WANT_REPLY 1u
#define KREX_FWD_PER_THREAD 2u /* a _ptsz/_ptds entry point: the per-thread default stream */
#define KREX_FWD_PAD 0xffffu   /* op of the filler that ends the ring before a wrap */
#define KREX_FWD_PINNED_ALIGN 4096u /* arena ranges start and end on pages */

/* The operations. Each names the driver entry point the server calls. */
#define KREX_FWD_OPS(X)                                                                                     \
    X(INIT, "cuInit")                                                                                       \
    X(DRIVER_VERSION, "cuDriverGetVersion")                                                                 \
    X(DEVICE_GET, "cuDeviceGet")                                                                            \
    X(DEVICE_COUNT, "cuDeviceGetCount")                                                                     \
    X(DEVICE_NAME, "cuDeviceGetName")                                                                       \
    X(DEVICE_ATTR, "cuDeviceGetAttribute")                                                                  \
    X(DEVICE_TOTAL_MEM, "cuDeviceTotalMem_v2")                                                              \
    X(DEVICE_UUID, "cuDeviceGetUuid_v2")                                                                    \
    X(PRIMARY_RETAIN, "cuDevicePrimaryCtxRetain")                                                           \
    X(PRIMARY_RELEASE, "cuDevicePrimaryCtxRelease_v2")                                                      \
    X(PRIMARY_STATE, "cuDevicePrimaryCtxGetState")                                                          \
    X(CTX_CREATE, "cuCtxCreate_v2")                                                                         \
    X(CTX_DESTROY, "cuCtxDestroy_v2")                                                                       \
    X(CTX_SYNC, "cuCtxSynchronize")                                                                         \
    X(CTX_GET_DEVICE, "cuCtxGetDevice")                                                                     \
    X(MEM_GET_INFO, "cuMemGetInfo_v2")                                                                      \
    X(MEM_ALLOC, "cuMemAlloc_v2")                                                                           \
    X(MEM_FREE, "cuMemFree_v2")                                                                             \
    X(HTOD, "cuMemcpyHtoD_v2")                                                                              \
    X(HTOD_ASYNC, "cuMemcpyHtoDAsync_v2")                                                                   \
    X(DTOH, "cuMemcpyDtoH_v2")                                                                              \
    X(DTOH_ASYNC, "cuMemcpyDtoHAsync_v2")                                                                   \
    X(DTOD, "cuMemcpyDtoD_v2")                                                                              \
    X(DTOD_ASYNC, "cuMemcpyDtoDAsync_v2")                                                                   \
    X(MEMSET, "cuMemsetD8_v2")                                                                              \
    X(MEMSET_ASYNC, "cuMemsetD8Async")                                                                      \
    X(MODULE_LOAD, "cuModuleLoadData")                                                                      \
    X(MODULE_UNLOAD, "cuModuleUnload")                                                                      \
    X(MODULE_FUNCTION, "cuModuleGetFunction")                                                               \
    X(MODULE_GLOBAL, "cuModuleGetGlobal_v2")                                                                \
    X(FUNC_PARAMS, "cuFuncGetParamInfo")                                                                    \
    X(FUNC_GET_ATTR, "cuFuncGetAttribute")                                                                  \
    X(FUNC_SET_ATTR, "cuFuncSetAttribute")                                                                  \
    X(FUNC_IS_LOADED, "cuFuncIsLoaded")                                                                     \
    X(FUNC_LOAD, "cuFuncLoad")                                                                              \
    X(LAUNCH, "cuLaunchKernel")                                                                             \
    X(STREAM_CREATE, "cuStreamCreateWithPriority")                                                          \
    X(STREAM_DESTROY, "cuStreamDestroy_v2")                                                                 \
    X(STREAM_SYNC, "cuStreamSynchronize")                                                                   \
    X(STREAM_QUERY, "cuStreamQuery")                                                                        \
    X(STREAM_WAIT_EVENT, "cuStreamWaitEvent")                                                               \
    X(EVENT_CREATE, "cuEventCreate")                                                                        \
    X(EVENT_DESTROY, "cuEventDestroy_v2")                                                                   \
    X(EVENT_RECORD, "cuEventRecordWithFlags")                                                               \
    X(EVENT_SYNC, "cuEventSynchronize")                                                                     \
    X(EVENT_QUERY, "cuEventQuery")                                                                          \
    X(EVENT_ELAPSED, "cuEventElapsedTime_v2")                                                               \
    X(LOADING_MODE, "cuModuleGetLoadingMode")                                                               \
    X(OCC_ACTIVE, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags")                                    \
    X(OCC_BLOCK_SIZE, "cuOccupancyMaxPotentialBlockSizeWithFlags")                                          \
    X(OCC_DYN_SMEM, "cuOccupancyAvailableDynamicSMemPerBlock")                                              \
    X(PINNED_REGISTER, "cuMemHostRegister_v2")                                                              \
    X(PINNED_UNREGISTER, "cuMemHostUnregister")                                                             \
    X(HTOD_PINNED, "cuMemcpyHtoDAsync_v2")                                                                  \
    X(DTOH_PINNED, "cuMemcpyDtoHAsync_v2")                                                                  \
    X(STREAM_BEGIN_CAPTURE, "cuStreamBeginCapture_v2")                                                      \
    X(STREAM_END_CAPTURE, "cuStreamEndCapture")                                                             \
    X(STREAM_IS_CAPTURING, "cuStreamIsCapturing")                                                           \
    X(GRAPH_INSTANTIATE, "cuGraphInstantiateWithFlags")                                                     \
    X(GRAPH_LAUNCH, "cuGraphLaunch")                                                                        \
    X(GRAPH_EXEC_DESTROY, "cuGraphExecDestroy")                                                             \
    X(GRAPH_DESTROY, "cuGraphDestroy")

#define KREX_FWD_ENUM(name, fn) KREX_FWD_OP_##name,
enum krex_fwd_op { KREX_FWD_OP_NONE = 0, KREX_FWD_OPS(KREX_FWD_ENUM) KREX_FWD_OP_COUNT };
#undef KREX_FWD_ENUM

#ifndef __cplusplus
_Static_assert(sizeof(struct krex_fwd_header) <= KREX_FWD_HEADER_SIZE, "header fits its page");
_Static_assert(sizeof(struct krex_fwd_msg) == 128, "request header is 128 bytes");
#endif

#endif /* KREX_FORWARD_H */
