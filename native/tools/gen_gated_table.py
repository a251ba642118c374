#!/usr/bin/env python3
"""Generate the table of gated CUDA driver entry points from cuda.h.

Every driver function by which work reaches a GPU (launches, copies, memsets,
event records, stream memory operations, stream-ordered allocation, context
creation, module loading) gets a typed wrapper per exported variant (_v2,
_v3, _ptsz, _ptds, legacy) that passes the gate around the real call.

A few more entry points are wrapped to be watched, not gated (class
KREX_CLASS_TRACKED): the elapsed time between two CUDA events and their
destruction, for unprotected-timing detection (intercept_events.c). HOOKS
adds a call of the event tracker before or after the real call of some
functions, gated (event records) or tracked.

The variants are read from cuda.h preprocessed with __CUDA_API_VERSION_INTERNAL,
the mode in which the header declares every exported symbol under its real
name (versioned, per-thread-stream and legacy), exactly as the driver's own
build sees it. Selection is by name pattern on the base name (the name with
_ptsz/_ptds and _vN removed), so a new variant of a gated function in a newer
header is picked up without editing a list.

    gen_gated_table.py [--cuda-include DIR] [--cc CC] [--output FILE] [--check]

--check exits 1 when FILE differs from what would be generated.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass

from cuda_header import PROTOTYPE, base_name, cuda_version, param_name, preprocess, split_params
from gate_hooks import gated_call, hooks
from generated_file import write_or_check

# (class, base-name pattern). First match wins; order matters (host functions
# before the general launch rule, synchronous copies before asynchronous ones).
#
# Each class says what a thread inside such a call can do to a region holder's
# timing, which decides whether region entry waits for it when the gate closes
# (KREX_CLASS_PERTURBING in include/krex_gate.h; docs/regions.md):
CLASSES: list[tuple[str, str]] = [
    # Submit GPU work: until the call returns it may put work on a stream that
    # would run inside the region. Entry waits; they only enqueue (microseconds).
    # A host function occupies its stream like a kernel and is ordered with it.
    ("KREX_CLASS_HOST_FUNC", r"cuLaunchHostFunc|cuStreamAddCallback"),
    ("KREX_CLASS_LAUNCH", r"cuLaunch\w*"),
    # A graph upload is stream-ordered work (it writes the graph to the device).
    ("KREX_CLASS_GRAPH", r"cuGraphLaunch|cuGraphUpload"),
    # Move memory synchronously: the transfer runs on the device during the
    # call, after the work queued before it in the stream (work the drain
    # would wait for anyway). Entry waits.
    ("KREX_CLASS_MEMCPY_SYNC", r"cuMemcpy(?!\w*Async)\w*"),
    ("KREX_CLASS_MEMSET_SYNC", r"cuMemset(?!\w*Async)\w*"),
    # Asynchronous copies and memsets: enqueued device work. Entry waits.
    ("KREX_CLASS_MEMCPY", r"cuMemcpy\w*"),
    ("KREX_CLASS_MEMSET", r"cuMemset\w*"),
    # An event record is a timestamp write the device executes in stream order;
    # a stream wait releases queued work when the event fires. Entry waits:
    # both are cheap enqueues, and a wait can release work into the region.
    ("KREX_CLASS_EVENT", r"cuEventRecord\w*|cuStreamWaitEvent"),
    # Stream memory operations and external semaphores are executed by the
    # device's front end in stream order; stream-ordered allocation, prefetch,
    # discard and sparse mapping are stream work too (migrations move memory).
    # Entry waits.
    ("KREX_CLASS_STREAM_MEMOP", r"cuStreamWaitValue\w*|cuStreamWriteValue\w*|cuStreamBatchMemOp"),
    (
        "KREX_CLASS_MEM_ASYNC",
        r"cuMemAllocAsync|cuMemFreeAsync|cuMemAllocFromPoolAsync|cuMemPrefetch\w*Async"
        r"|cuMemDiscard\w*Async|cuMemBatchDecompressAsync",
    ),
    # Host-side: entry lets a thread inside these finish before the gate closes
    # (bounded, regions.host_side_wait_s), never waits for it at the close; one
    # still inside then parks at its next gated call. Context creation is long
    # (0.2-2 s under contention: a node-wide driver lock) and nearly all host
    # and kernel-driver work: it reserves device memory and sets up channels
    # and page tables, and puts none of the tenant's work on a stream. Yet on
    # the H100 a context created inside a region slowed its trials by up to
    # 38% (docs/BENCHMARKS.md): the kernel driver's work is on the device.
    ("KREX_CLASS_CONTEXT", r"cuCtxCreate|cuDevicePrimaryCtxRetain"),
    # Module loading is mostly host work (parsing the fatbinary, JIT-compiling
    # PTX: seconds), ending with an upload of the module's code and static data
    # into device memory: a copy bounded by the module's size (usually KBs to a
    # few MB), no kernel. With lazy loading (the default since CUDA 12.2) a
    # function's code is uploaded later, one function at a time: by
    # cuModuleGetFunction (Triton, CuPy), cuKernelGetFunction (cudart) or
    # cuFuncLoad, or else inside its first launch, so the library calls
    # cuFuncLoad itself before a launch whose function is not loaded yet
    # (lazy_load.c). The residual copy is accepted; entry waits for every
    # class with `regions.entry_waits_for = "all"` where it must not be.
    (
        "KREX_CLASS_MODULE",
        r"cuModuleLoad\w*|cuLibraryLoad\w*|cuModuleGetFunction|cuFuncLoad|cuKernelGetFunction",
    ),
    # External semaphores (the device waits or signals) and sparse array
    # mapping (stream-ordered): stream work. Entry waits.
    ("KREX_CLASS_OTHER", r"cuSignalExternalSemaphoresAsync|cuWaitExternalSemaphoresAsync|cuMemMapArrayAsync"),
    # Host-side too: device and pinned host memory allocated, released or
    # mapped outside stream order. No work of the tenant's reaches a stream,
    # but the kernel driver updates page tables and scrubs memory: on the
    # H100 another process
    # allocating and freeing 512 MiB in a loop slowed a timed trial by +6% at
    # the median and +277% at the p99, pinning and unpinning host memory by
    # +1400% at the p99 (benchmarks/perturbation_probe.py). Parked while a
    # region is held; those in progress finish before the gate closes.
    (
        "KREX_CLASS_MEMORY",
        r"cuMemAlloc\w*|cuMemFree\w*|cuMemHostAlloc|cuMemHostRegister|cuMemHostUnregister|cuMemCreate|cuMemRelease"
        r"|cuMemMap|cuMemUnmap",
    ),
    # Context teardown (cuCtxDestroy, cuDevicePrimaryCtxRelease, ...) stays
    # ungated: a tenant's end inside a region did not measurably slow its
    # trials on the H100 (docs/BENCHMARKS.md), and parking it would hold
    # every ending command until the region in progress is over.
    # Watched, never gated: the elapsed time between two events and their
    # destruction (unprotected timings), and the host's waits for the device,
    # which join streams for measurement integrity (intercept_integrity.c).
    (
        "KREX_CLASS_TRACKED",
        r"cuEventElapsedTime|cuEventDestroy|cuStreamSynchronize|cuCtxSynchronize|cuEventSynchronize"
        r"|cuStreamQuery|cuEventQuery",
    ),
]

# base name -> (C before the real call, C after it): gate_hooks.py.
HOOKS = hooks("cu", "CUDA_SUCCESS", sync_all=("CtxSynchronize",))


@dataclass(frozen=True)
class Variant:
    name: str
    base: str
    klass: str
    params: str  # normalised parameter list
    args: tuple[str, ...]


def classify(base: str) -> str | None:
    for klass, pattern in CLASSES:
        if re.fullmatch(pattern, base):
            return klass
    return None


def collect(text: str) -> list[Variant]:
    seen: dict[str, Variant] = {}
    for m in PROTOTYPE.finditer(text):
        name, params = m.group(1), " ".join(m.group(2).split())
        klass = classify(base_name(name))
        if klass is None:
            continue
        plist = [] if params in ("", "void") else split_params(params)
        v = Variant(name, base_name(name), klass, params,
                    tuple(param_name(p, name) for p in plist))
        if name in seen and seen[name].params != v.params:
            raise SystemExit(f"gen_gated_table: {name} declared with two signatures")
        seen[name] = v
    return [seen[n] for n in sorted(seen)]


def launched_function(v: Variant) -> str:
    """The CUfunction argument of a kernel launch, loaded before it (lazy_load.c); "" otherwise."""
    if v.klass != "KREX_CLASS_LAUNCH":
        return ""
    plist = [] if v.params in ("", "void") else split_params(v.params)
    return next((a for p, a in zip(plist, v.args, strict=False) if p.split()[0] == "CUfunction"), "")


def launch_stream(v: Variant) -> str | None:
    """For a kernel or graph launch, the C expression of the stream it goes on
    ("NULL" for the legacy forms without one); None for any other call."""
    if not (v.klass == "KREX_CLASS_LAUNCH" or v.base == "cuGraphLaunch"):
        return None
    plist = [] if v.params in ("", "void") else split_params(v.params)
    for p, a in zip(plist, v.args, strict=False):
        if p.split()[0] == "CUstream":
            return a
        if "CUlaunchConfig" in p:  # cuLaunchKernelEx: the stream is in the configuration
            return f"({a} != NULL ? {a}->hStream : NULL)"
    return "NULL"


def render(variants: list[Variant], version: str) -> str:
    gated = [v for v in variants if v.klass != "KREX_CLASS_TRACKED"]
    bases = sorted({v.base for v in gated})
    out = [
        "/*",
        " * GENERATED by native/tools/gen_gated_table.py from cuda.h (CUDA_VERSION",
        f" * {version}). Do not edit; run `make -C native gated-table` to regenerate.",
        " *",
        f" * {len(gated)} gated entry points ({len(bases)} functions and their",
        f" * exported variants) and {len(variants) - len(gated)} tracked ones (event timing, host waits; not gated).",
        " * Each gated wrapper passes the gate around the real call;",
        " * programs linked with -lcuda reach them by symbol interposition, the rest",
        " * through dlsym / cuGetProcAddress (real pointer -> wrapper, intercept.c).",
        " */",
        "#include \"intercept.h\"",
        "",
    ]
    for i, v in enumerate(variants):
        call_args = ", ".join(v.args)
        pt = int(v.name.endswith(("_ptsz", "_ptds")))
        before, after = (h.format(a=v.args, pt=pt) for h in HOOKS.get(v.base, ("", "")))
        stream = launch_stream(v)
        if stream is not None:
            after = f"if (r == CUDA_SUCCESS && outer) krex_integrity_launch({stream}, {pt});"
        tracked = v.klass == "KREX_CLASS_TRACKED"
        out += [
            f"#undef {v.name}",
            f"typedef CUresult (CUDAAPI *krex_pfn_{v.name})({v.params});",
            f"CUresult CUDAAPI {v.name}({v.params})",
            "{",
            f"    krex_pfn_{v.name} real = (krex_pfn_{v.name})krex_gated_real({i});",
            "    if (real == NULL)",
            "        return CUDA_ERROR_NOT_FOUND;",
        ]
        function = launched_function(v)
        if function:
            # Before the gate: the load is a module-class call of its own.
            out.append(f"    krex_load_before_launch({function});")
        out += gated_call(i, tracked, before, after, "CUresult", f"real({call_args})")
    out.append(f"const unsigned krex_gated_count = {len(variants)};")
    out.append("")
    out.append("const struct krex_gated_fn krex_gated_fns[] = {")
    for v in variants:
        out.append(f"    {{\"{v.name}\", {v.klass}, (void *){v.name}}},")
    out.append("};")
    out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuda-include", default=os.environ.get("CUDA_INCLUDE", "/usr/local/cuda/include"))
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--output", default=os.path.join(here, "..", "src", "intercept", "intercept_gated_table.c"))
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    ns = ap.parse_args()

    text = preprocess(ns.cc, ns.cuda_include)
    variants = collect(text)
    if not variants:
        raise SystemExit("gen_gated_table: no gated prototypes found; wrong cuda.h?")
    rendered = render(variants, cuda_version(ns.cuda_include))
    return write_or_check(ns.output, rendered, f"{ns.cuda_include}/cuda.h", ns.check,
                          f"{len(variants)} wrapped entry points")


if __name__ == "__main__":
    sys.exit(main())
