"""The operations of forwarded mode that have one shape, as data: what each
client entry point sends (which of its parameters travel in which request
slot), what comes back (the parameters it writes from the reply's values),
whether it waits for the reply, and what the context server checks and calls.

tools/gen_forward_ops.py writes the client's entry points
(src/forward/client_ops_gen.c) and the server's execution of them
(src/forward/server_ops_gen.inc) from this table, so the two sides of the
wire cannot drift apart. The operations of BY_HAND, and the server's side
of those listed with `server=""`, are written by hand next to the generated
code (src/forward/client_api.c, server_exec.c), each for the reason given;
every operation of include/krex_forward.h is in one of the two.

What the server checks follows from a parameter's type: a CUfunction,
CUstream, CUevent, CUmodule, CUgraph or CUgraphExec must be one the server
gave the command (or a default stream), else CUDA_ERROR_INVALID_HANDLE; `ranges` name device ranges
that must lie inside the command's memory, else CUDA_ERROR_INVALID_VALUE.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Entry:
    """One exported entry point of an operation. `params` are its C
    parameters ("type name"); `fixed` gives the request slots this entry
    has no parameter for (a constant, as C)."""

    name: str
    params: tuple[str, ...]
    fixed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Op:
    """One operation (KREX_FWD_OP_<name> of include/krex_forward.h).

    slots: the request's argument slots, in order, named after parameters.
    outs: the out parameters, in the order of the reply's values.
    entries: the client's entry points; the first one's parameters are the
      driver entry point's (`server`), which the server calls.
    reply: the client waits for the reply (else the request is sent and a
      failure is reported by the next call that waits).
    per_thread: the suffix of each entry's per-thread-stream twin.
    need_init: the entry point fails with CUDA_ERROR_NOT_INITIALIZED before cuInit.
    after: C the client runs once the call succeeded.
    server: the driver entry point the server calls; "" when the server's
      case is written by hand (src/forward/server_exec.c).
    ranges: (pointer, size) slot pairs the server checks against the command's memory.
    creates: the server's list of the command's handles that the first out
      joins, with the driver entry point that destroys it again on failure.
    forgets: the server's list the first slot leaves once the call succeeded.
    """

    name: str
    entries: tuple[Entry, ...]
    slots: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()
    reply: bool = True
    per_thread: str = ""
    need_init: bool = True
    after: str = ""
    server: str = ""
    ranges: tuple[tuple[str, str], ...] = ()
    creates: tuple[str, str] | None = None
    forgets: str = ""


def entry(name: str, *params: str, **fixed: str) -> Entry:
    return Entry(name, params, dict(fixed))


def _memset(name: str, value_type: str, width: str, stream: bool) -> Entry:
    params = ("CUdeviceptr dstDevice", f"{value_type} value", "size_t count")
    if stream:
        return entry(name, *params, "CUstream hStream", width=width)
    return entry(name, *params, width=width, hStream="0")


OPS: tuple[Op, ...] = (
    # cuInit needs no earlier cuInit, and records that it happened.
    Op("INIT", (entry("cuInit", "unsigned int Flags"),), slots=("Flags",), need_init=False,
       after="fwd_set_initialised();", server="cuInit"),
    Op("DRIVER_VERSION", (entry("cuDriverGetVersion", "int *driverVersion"),), outs=("driverVersion",),
       need_init=False, server="cuDriverGetVersion"),
    Op("DEVICE_GET", (entry("cuDeviceGet", "CUdevice *device", "int ordinal"),), slots=("ordinal",),
       outs=("device",), server="cuDeviceGet"),
    Op("DEVICE_COUNT", (entry("cuDeviceGetCount", "int *count"),), outs=("count",), server="cuDeviceGetCount"),
    Op("DEVICE_ATTR", (entry("cuDeviceGetAttribute", "int *pi", "CUdevice_attribute attrib", "CUdevice dev"),),
       slots=("attrib", "dev"), outs=("pi",), server="cuDeviceGetAttribute"),
    Op("DEVICE_TOTAL_MEM", (entry("cuDeviceTotalMem_v2", "size_t *bytes", "CUdevice dev"),), slots=("dev",),
       outs=("bytes",), server="cuDeviceTotalMem_v2"),
    # The server counts the command's retains: it may release only those.
    Op("PRIMARY_RETAIN", (entry("cuDevicePrimaryCtxRetain", "CUcontext *pctx", "CUdevice dev"),), slots=("dev",),
       outs=("pctx",)),
    Op("PRIMARY_RELEASE", (entry("cuDevicePrimaryCtxRelease", "CUdevice dev"),), slots=("dev",)),
    Op("PRIMARY_STATE", (entry("cuDevicePrimaryCtxGetState", "CUdevice dev", "unsigned int *flags", "int *active"),),
       slots=("dev",), outs=("flags", "active"), server="cuDevicePrimaryCtxGetState"),
    # Contexts are the server's to track (a destroyed one takes its memory and handles).
    Op("CTX_CREATE", (entry("cuCtxCreate", "CUcontext *pctx", "unsigned int flags", "CUdevice dev"),),
       slots=("flags", "dev"), outs=("pctx",), after="fwd_ctx_pushed(*pctx); /* the driver makes it current */"),
    Op("CTX_DESTROY", (entry("cuCtxDestroy", "CUcontext ctx"),), slots=("ctx",), after="fwd_ctx_destroyed(ctx);"),
    Op("CTX_SYNC", (entry("cuCtxSynchronize_v2", "CUcontext ctx"), entry("cuCtxSynchronize", ctx="0")),
       slots=("ctx",)),
    Op("CTX_GET_DEVICE", (entry("cuCtxGetDevice", "CUdevice *device"),), outs=("device",), server="cuCtxGetDevice"),
    Op("MEM_GET_INFO", (entry("cuMemGetInfo_v2", "size_t *free_bytes", "size_t *total"),),
       outs=("free_bytes", "total"),
       server="cuMemGetInfo_v2"),
    # Allocations are zeroed and become the command's regions on the server.
    Op("MEM_ALLOC", (entry("cuMemAlloc_v2", "CUdeviceptr *dptr", "size_t bytesize"),), slots=("bytesize",),
       outs=("dptr",)),
    Op("MEM_FREE", (entry("cuMemFree_v2", "CUdeviceptr dptr"),), slots=("dptr",)),
    # Unified addressing: cuMemcpy takes both sides as device memory (a host
    # pointer of the command means nothing to the server).
    Op("DTOD", (entry("cuMemcpyDtoD_v2", "CUdeviceptr dstDevice", "CUdeviceptr srcDevice", "size_t ByteCount",
                      hStream="0"),
                entry("cuMemcpy", "CUdeviceptr dstDevice", "CUdeviceptr srcDevice", "size_t ByteCount", hStream="0")),
       slots=("dstDevice", "srcDevice", "ByteCount", "hStream"), per_thread="_ptds", server="cuMemcpyDtoD_v2",
       ranges=(("dstDevice", "ByteCount"), ("srcDevice", "ByteCount"))),
    Op("DTOD_ASYNC", (entry("cuMemcpyDtoDAsync_v2", "CUdeviceptr dstDevice", "CUdeviceptr srcDevice",
                            "size_t ByteCount", "CUstream hStream"),
                      entry("cuMemcpyAsync", "CUdeviceptr dstDevice", "CUdeviceptr srcDevice", "size_t ByteCount",
                            "CUstream hStream")),
       slots=("dstDevice", "srcDevice", "ByteCount", "hStream"), reply=False, per_thread="_ptsz",
       server="cuMemcpyDtoDAsync_v2", ranges=(("dstDevice", "ByteCount"), ("srcDevice", "ByteCount"))),
    # One operation for the three element widths: the server picks the driver
    # entry point by the width and checks count * width bytes.
    Op("MEMSET", (_memset("cuMemsetD8_v2", "unsigned char", "1", False),
                  _memset("cuMemsetD16_v2", "unsigned short", "2", False),
                  _memset("cuMemsetD32_v2", "unsigned int", "4", False)),
       slots=("dstDevice", "value", "count", "width", "hStream"), per_thread="_ptds"),
    Op("MEMSET_ASYNC", (_memset("cuMemsetD8Async", "unsigned char", "1", True),
                        _memset("cuMemsetD16Async", "unsigned short", "2", True),
                        _memset("cuMemsetD32Async", "unsigned int", "4", True)),
       slots=("dstDevice", "value", "count", "width", "hStream"), reply=False, per_thread="_ptsz"),
    Op("FUNC_GET_ATTR", (entry("cuFuncGetAttribute", "int *pi", "CUfunction_attribute attrib", "CUfunction hfunc"),),
       slots=("attrib", "hfunc"), outs=("pi",), server="cuFuncGetAttribute"),
    Op("FUNC_SET_ATTR", (entry("cuFuncSetAttribute", "CUfunction hfunc", "CUfunction_attribute attrib", "int value"),),
       slots=("hfunc", "attrib", "value"), server="cuFuncSetAttribute"),
    Op("FUNC_IS_LOADED", (entry("cuFuncIsLoaded", "CUfunctionLoadingState *state", "CUfunction function"),),
       slots=("function",), outs=("state",), server="cuFuncIsLoaded"),
    Op("FUNC_LOAD", (entry("cuFuncLoad", "CUfunction function"),), slots=("function",), server="cuFuncLoad"),
    Op("OCC_ACTIVE", (entry("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "int *numBlocks", "CUfunction func",
                            "int blockSize", "size_t dynamicSMemSize", "unsigned int flags"),
                      entry("cuOccupancyMaxActiveBlocksPerMultiprocessor", "int *numBlocks", "CUfunction func",
                            "int blockSize", "size_t dynamicSMemSize", flags="0")),
       slots=("func", "blockSize", "dynamicSMemSize", "flags"), outs=("numBlocks",),
       server="cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"),
    Op("OCC_DYN_SMEM", (entry("cuOccupancyAvailableDynamicSMemPerBlock", "size_t *dynamicSmemSize", "CUfunction func",
                              "int numBlocks", "int blockSize"),),
       slots=("func", "numBlocks", "blockSize"), outs=("dynamicSmemSize",),
       server="cuOccupancyAvailableDynamicSMemPerBlock"),
    Op("STREAM_CREATE", (entry("cuStreamCreateWithPriority", "CUstream *phStream", "unsigned int flags", "int priority"),
                         entry("cuStreamCreate", "CUstream *phStream", "unsigned int flags", priority="0")),
       slots=("flags", "priority"), outs=("phStream",), server="cuStreamCreateWithPriority",
       creates=("streams", "cuStreamDestroy_v2")),
    Op("STREAM_DESTROY", (entry("cuStreamDestroy", "CUstream hStream"),), slots=("hStream",),
       server="cuStreamDestroy_v2", forgets="streams"),
    Op("STREAM_SYNC", (entry("cuStreamSynchronize", "CUstream hStream"),), slots=("hStream",), per_thread="_ptsz",
       server="cuStreamSynchronize"),
    Op("STREAM_QUERY", (entry("cuStreamQuery", "CUstream hStream"),), slots=("hStream",), per_thread="_ptsz",
       server="cuStreamQuery"),
    Op("STREAM_WAIT_EVENT", (entry("cuStreamWaitEvent", "CUstream hStream", "CUevent hEvent", "unsigned int Flags"),),
       slots=("hStream", "hEvent", "Flags"), reply=False, per_thread="_ptsz", server="cuStreamWaitEvent"),
    Op("EVENT_CREATE", (entry("cuEventCreate", "CUevent *phEvent", "unsigned int Flags"),), slots=("Flags",),
       outs=("phEvent",), server="cuEventCreate", creates=("events", "cuEventDestroy_v2")),
    Op("EVENT_DESTROY", (entry("cuEventDestroy", "CUevent hEvent"),), slots=("hEvent",), server="cuEventDestroy_v2",
       forgets="events"),
    Op("EVENT_RECORD", (entry("cuEventRecordWithFlags", "CUevent hEvent", "CUstream hStream", "unsigned int flags"),
                        entry("cuEventRecord", "CUevent hEvent", "CUstream hStream", flags="0")),
       slots=("hEvent", "hStream", "flags"), reply=False, per_thread="_ptsz", server="cuEventRecordWithFlags"),
    Op("EVENT_SYNC", (entry("cuEventSynchronize", "CUevent hEvent"),), slots=("hEvent",), server="cuEventSynchronize"),
    Op("EVENT_QUERY", (entry("cuEventQuery", "CUevent hEvent"),), slots=("hEvent",), server="cuEventQuery"),
    Op("EVENT_ELAPSED", (entry("cuEventElapsedTime", "float *pMilliseconds", "CUevent hStart", "CUevent hEnd"),),
       slots=("hStart", "hEnd"), outs=("pMilliseconds",), server="cuEventElapsedTime_v2"),
    Op("LOADING_MODE", (entry("cuModuleGetLoadingMode", "CUmoduleLoadingMode *mode"),), outs=("mode",),
       server="cuModuleGetLoadingMode"),
    # Stream capture runs in the server, on the command's stream: the work the
    # command then sends there becomes the graph's nodes (each checked as it
    # comes, as when it runs; copies from or to host memory are refused while
    # the stream captures, server_exec.c). Graphs and executable graphs are
    # the command's handles, destroyed with what it left.
    Op("STREAM_BEGIN_CAPTURE", (entry("cuStreamBeginCapture_v2", "CUstream hStream", "CUstreamCaptureMode mode"),),
       slots=("hStream", "mode"), per_thread="_ptsz", server="cuStreamBeginCapture_v2"),
    Op("STREAM_END_CAPTURE", (entry("cuStreamEndCapture", "CUstream hStream", "CUgraph *phGraph"),),
       slots=("hStream",), outs=("phGraph",), per_thread="_ptsz", server="cuStreamEndCapture",
       creates=("graphs", "cuGraphDestroy")),
    Op("STREAM_IS_CAPTURING", (entry("cuStreamIsCapturing", "CUstream hStream",
                                     "CUstreamCaptureStatus *captureStatus"),),
       slots=("hStream",), outs=("captureStatus",), per_thread="_ptsz", server="cuStreamIsCapturing"),
    Op("GRAPH_INSTANTIATE", (entry("cuGraphInstantiateWithFlags", "CUgraphExec *phGraphExec", "CUgraph hGraph",
                                   "unsigned long long flags"),),
       slots=("hGraph", "flags"), outs=("phGraphExec",), server="cuGraphInstantiateWithFlags",
       creates=("graph_execs", "cuGraphExecDestroy")),
    Op("GRAPH_LAUNCH", (entry("cuGraphLaunch", "CUgraphExec hGraphExec", "CUstream hStream"),),
       slots=("hGraphExec", "hStream"), reply=False, per_thread="_ptsz", server="cuGraphLaunch"),
    Op("GRAPH_EXEC_DESTROY", (entry("cuGraphExecDestroy", "CUgraphExec hGraphExec"),), slots=("hGraphExec",),
       server="cuGraphExecDestroy", forgets="graph_execs"),
    Op("GRAPH_DESTROY", (entry("cuGraphDestroy", "CUgraph hGraph"),), slots=("hGraph",), server="cuGraphDestroy",
       forgets="graphs"),
)

# The operations whose both sides are written by hand, and why.
BY_HAND: dict[str, str] = {
    "DEVICE_NAME": "the name comes back as bytes in the staging area, as long as the caller's buffer",
    "DEVICE_UUID": "the UUID comes back as bytes in the staging area",
    "HTOD": "the bytes travel in the requests, in chunks of what one request carries",
    "HTOD_ASYNC": "as HTOD, sent without waiting; the server copies the bytes until the stream has passed them",
    "DTOH": "the bytes come back through the staging area, in chunks of what it holds",
    "DTOH_ASYNC": "as DTOH; the server waits for the stream, the bytes are the program's at return",
    "MODULE_LOAD": "the image travels as a blob, its size read from its headers (or the file read here)",
    "MODULE_UNLOAD": "the client forgets its parameter layouts; the server zeroes the module's globals first",
    "MODULE_FUNCTION": "the name travels as a blob; the function joins the command's, with its module",
    "MODULE_GLOBAL": "the name travels as a blob; the global becomes a region of the command's",
    "FUNC_PARAMS": "the layout comes back through the staging area and is kept per function by the client",
    "OCC_BLOCK_SIZE": "the program's callback is evaluated by the client into a table the server picks from",
    "LAUNCH": "the kernel parameters and launch attributes travel as a blob, checked by the server",
    "PINNED_REGISTER": "a range of the command's pinned arena (an offset, not a pointer), registered on the "
                       "server's own mapping of it and kept in the server's table of the command's pinned ranges",
    "PINNED_UNREGISTER": "the range leaves the server's table once the command's work that may use it has run",
    "HTOD_PINNED": "an offset into a registered range of the pinned arena, checked by the server, copied from its "
                   "own mapping (the synchronous form waits for the reply, the asynchronous one is sent without)",
    "DTOH_PINNED": "as HTOD_PINNED, to the host: the bytes land in the arena, no staging area involved",
}
