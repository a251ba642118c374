#!/usr/bin/env python3
"""Generate the table of gated HIP runtime entry points from the HIP headers.

The HIP counterpart of gen_gated_table.py (which reads cuda.h): every HIP
function by which work reaches an AMD GPU (kernel launches in all their forms,
graph launches, copies and memsets, event records and stream waits, stream
memory operations, stream-ordered allocation, runtime initialisation, module
loading) gets a typed wrapper per exported variant (_spt: the per-thread
default stream) that passes the gate around the real call. Event timing and
host waits are wrapped to be watched, not gated (KREX_CLASS_TRACKED), for
unprotected-timing detection and measurement integrity, as on CUDA.

The prototypes are read from hip/hip_runtime_api.h preprocessed as C (the
functions with C linkage, the names libamdhip64 exports) and, with hip_ext.h,
as C++: a function found only there (hipExtModuleLaunchKernel,
hipHccModuleLaunchKernel) has C++ linkage, and its wrapper is exported under
the mangled name the C++ compiler gives its declaration.

    gen_hip_gated_table.py [--hip-include DIR] [--cc CC] [--cxx CXX] [--output FILE] [--check]

--check exits 1 when a file differs from what would be generated.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from cuda_header import param_name, split_params
from gate_hooks import gated_call, hooks
from generated_file import write_or_check

PLATFORM = "-D__HIP_PLATFORM_AMD__"
PROTOTYPE = re.compile(
    r"\bhipError_t\s+(hip[A-Z]\w*)\s*\(([^;{]*?)\)\s*(?:__attribute__\s*\(\(.*?\)\)\s*)*;", re.DOTALL
)

# (class, base-name pattern), first match wins: the reasons of each class are
# gen_gated_table.py's (docs/regions.md); the HIP names differ.
CLASSES: list[tuple[str, str]] = [
    ("KREX_CLASS_HOST_FUNC", r"hipLaunchHostFunc|hipStreamAddCallback"),
    # hipLaunchKernel, hipLaunchCooperativeKernel(MultiDevice), hipLaunchByPtr,
    # hipModuleLaunch*, hipExtLaunch* and the C++ hipExtModuleLaunchKernel /
    # hipHccModuleLaunchKernel: every kernel launch.
    ("KREX_CLASS_LAUNCH", r"hipLaunch\w*|hipModuleLaunch\w*|hipExtLaunch\w*|hipExtModuleLaunch\w*"
                          r"|hipHccModuleLaunch\w*"),
    ("KREX_CLASS_GRAPH", r"hipGraphLaunch|hipGraphUpload"),
    ("KREX_CLASS_MEMCPY_SYNC", r"hipMemcpy(?!\w*Async)\w*"),
    ("KREX_CLASS_MEMSET_SYNC", r"hipMemset(?!\w*Async)\w*"),
    ("KREX_CLASS_MEMCPY", r"hipMemcpy\w*"),
    ("KREX_CLASS_MEMSET", r"hipMemset\w*"),
    ("KREX_CLASS_EVENT", r"hipEventRecord\w*|hipStreamWaitEvent"),
    ("KREX_CLASS_STREAM_MEMOP", r"hipStreamWaitValue\w*|hipStreamWriteValue\w*"),
    ("KREX_CLASS_MEM_ASYNC", r"hipMallocAsync|hipFreeAsync|hipMallocFromPoolAsync|hipMemPrefetchAsync"),
    # Host-side: HIP's initialisation and context creation. The runtime
    # initialises itself inside whichever of its calls comes first (seconds
    # on ROCm: devices, queues, code objects); the library makes that first
    # call hipInit, a call of this class (hip_init.c), so a tenant is frozen
    # only once out of it: never in the middle of its HIP initialisation.
    ("KREX_CLASS_CONTEXT", r"hipInit|hipSetDevice|hipGetDeviceCount|hipDeviceGet|hipCtxCreate"
                           r"|hipDevicePrimaryCtxRetain"),
    ("KREX_CLASS_MODULE", r"hipModuleLoad\w*|hipModuleGetFunction"),
    ("KREX_CLASS_OTHER", r"hipSignalExternalSemaphoresAsync|hipWaitExternalSemaphoresAsync"),
    ("KREX_CLASS_TRACKED",
     r"hipEventElapsedTime|hipEventDestroy|hipStreamSynchronize|hipDeviceSynchronize|hipCtxSynchronize"
     r"|hipEventSynchronize|hipStreamQuery|hipEventQuery"),
]

# base name -> (C before the real call, C after it): gate_hooks.py.
HOOKS = hooks("hip", "hipSuccess", sync_all=("DeviceSynchronize", "CtxSynchronize"))


@dataclass(frozen=True)
class Variant:
    name: str  # the C name
    base: str
    klass: str
    params: str
    args: tuple[str, ...]
    symbol: str  # the exported symbol: the name, or its C++ mangling


def base_name(name: str) -> str:
    return re.sub(r"_spt$", "", name)


def classify(base: str) -> str | None:
    return next((k for k, pattern in CLASSES if re.fullmatch(pattern, base)), None)


def preprocess(compiler: str, include: str, headers: tuple[str, ...], lang: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".h", delete=False) as f:
        f.write("".join(f"#include <{h}>\n" for h in headers))
        src = f.name
    try:
        return subprocess.run([compiler, "-E", "-P", "-x", lang, PLATFORM, f"-I{include}", src],
                              check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(src)


def without_defaults(params: str) -> str:
    """C++ default arguments (`hipEvent_t startEvent = nullptr`) dropped."""
    return ", ".join(re.sub(r"\s*=.*$", "", p) for p in split_params(params))


def prototypes(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for m in PROTOTYPE.finditer(text):
        name, params = m.group(1), without_defaults(" ".join(m.group(2).split()))
        if classify(base_name(name)) is None:
            continue
        if found.get(name, params) != params:
            raise SystemExit(f"gen_hip_gated_table: {name} declared with two signatures")
        found[name] = params
    return found


def mangled(cxx: str, include: str, functions: dict[str, str]) -> dict[str, str]:
    """The C++ compiler's symbol for each declaration (name -> symbol)."""
    if not functions:
        return {}
    decls = "".join(f"hipError_t {n}({p});\n" for n, p in functions.items())
    refs = ", ".join(f"(void *)&{n}" for n in functions)
    with tempfile.TemporaryDirectory() as tmp:
        src, obj = os.path.join(tmp, "names.cpp"), os.path.join(tmp, "names.o")
        with open(src, "w", encoding="utf-8") as f:
            f.write(f"#include <hip/hip_runtime_api.h>\n{decls}void *krex_names[] = {{{refs}}};\n")
        subprocess.run([cxx, "-c", PLATFORM, f"-I{include}", src, "-o", obj], check=True, capture_output=True)
        undefined = subprocess.run(["nm", "-u", obj], check=True, capture_output=True, text=True).stdout.split()
    out = {}
    for n in functions:
        symbol = next((s for s in undefined if s.startswith(f"_Z{len(n)}{n}")), None)
        if symbol is None:
            raise SystemExit(f"gen_hip_gated_table: no C++ symbol found for {n}")
        out[n] = symbol
    return out


def collect(c_text: str, cxx_text: str, cxx: str, include: str) -> list[Variant]:
    c_only = prototypes(c_text)
    cxx_only = {n: p for n, p in prototypes(cxx_text).items() if n not in c_only}
    symbols = {n: n for n in c_only} | mangled(cxx, include, cxx_only)
    variants = []
    for name, params in (c_only | cxx_only).items():
        plist = [] if params in ("", "void") else split_params(params)
        variants.append(Variant(name, base_name(name), classify(base_name(name)) or "", params,
                                tuple(param_name(p, name) for p in plist), symbols[name]))
    # Sorted by exported symbol: intercept.c looks names up by binary search.
    return sorted(variants, key=lambda v: v.symbol)


def launch_stream(v: Variant) -> str | None:
    if v.klass != "KREX_CLASS_LAUNCH" and v.base != "hipGraphLaunch":
        return None
    plist = [] if v.params in ("", "void") else split_params(v.params)
    return next((a for p, a in zip(plist, v.args, strict=False) if p.split()[0] == "hipStream_t"), "NULL")


def render_names(variants: list[Variant], version: str) -> str:
    out = ["/*", " * GENERATED by native/tools/gen_hip_gated_table.py from the HIP headers",
           f" * (HIP_VERSION {version}): the exported symbol of each gated HIP function with",
           " * C++ linkage, for the wrappers and the simulated HIP runtime. Do not edit.", " */",
           "#ifndef KREX_HIP_CXX_NAMES_H", "#define KREX_HIP_CXX_NAMES_H", ""]
    out += [f"#define KREX_HIP_SYMBOL_{v.name} \"{v.symbol}\"" for v in variants if v.symbol != v.name]
    return "\n".join([*out, "", "#endif /* KREX_HIP_CXX_NAMES_H */", ""])


def render(variants: list[Variant], version: str) -> str:
    gated = [v for v in variants if v.klass != "KREX_CLASS_TRACKED"]
    out = [
        "/*",
        " * GENERATED by native/tools/gen_hip_gated_table.py from the HIP headers",
        f" * (HIP_VERSION {version}). Do not edit; run `make -C native hip-gated-table`.",
        " *",
        f" * {len(gated)} gated HIP entry points ({len({v.base for v in gated})} functions and their _spt",
        f" * variants) and {len(variants) - len(gated)} tracked ones (event timing, host waits; not gated).",
        " * Programs linked with libamdhip64 reach them by symbol interposition, the",
        " * rest through dlsym / hipGetProcAddress (real pointer -> wrapper, intercept.c).",
        " */",
        "#include \"hip_intercept.h\"",
        "",
        "/* Deprecated entry points still submit work: they are wrapped like the rest. */",
        "#pragma GCC diagnostic ignored \"-Wdeprecated-declarations\"",
        "",
    ]
    for i, v in enumerate(variants):
        pt = int(v.name.endswith("_spt"))
        before, after = (h.format(a=v.args, pt=pt) for h in HOOKS.get(v.base, ("", "")))
        stream = launch_stream(v)
        if stream is not None:
            after = f"if (r == hipSuccess && outer) krex_integrity_launch({stream}, {pt});"
        tracked = v.klass == "KREX_CLASS_TRACKED"
        fn = v.name if v.symbol == v.name else f"krex_cxx_{v.name}"
        if v.symbol != v.name:  # C++ linkage: our C definition under its mangled name
            out.append(f"KREX_EXPORT hipError_t {fn}({v.params}) __asm__(\"{v.symbol}\");")
        out += [
            f"typedef hipError_t (*krex_pfn_{v.name})({v.params});",
            f"hipError_t {fn}({v.params})",
            "{",
            f"    krex_pfn_{v.name} real = (krex_pfn_{v.name})krex_gated_real({i});",
            "    if (real == NULL)",
            "        return hipErrorNotFound;",
        ]
        if v.klass != "KREX_CLASS_CONTEXT":
            # HIP initialises itself inside its first call: make that a context-class call.
            out.append("    krex_hip_init_before_call();")
        out += gated_call(i, tracked, before, after, "hipError_t", f"real({', '.join(v.args)})")
    out += [f"const unsigned krex_gated_count = {len(variants)};", "",
            "const struct krex_gated_fn krex_gated_fns[] = {"]
    for v in variants:
        fn = v.name if v.symbol == v.name else f"krex_cxx_{v.name}"
        out.append(f"    {{\"{v.symbol}\", {v.klass}, (void *){fn}}},")
    out += ["};", ""]
    return "\n".join(out)


def hip_version(include: str) -> str:
    with open(os.path.join(include, "hip", "hip_version.h"), encoding="utf-8", errors="replace") as f:
        text = f.read()
    parts = [re.search(rf"#define\s+HIP_VERSION_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts if m) or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hip-include", default=os.environ.get("HIP_INCLUDE", "/usr/include"))
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    here = os.path.dirname(os.path.abspath(__file__))
    folder = os.path.join(here, "..", "src", "hip_intercept")
    ap.add_argument("--output", default=os.path.join(folder, "hip_gated_table.c"))
    ap.add_argument("--names", default=os.path.join(folder, "hip_cxx_names.h"))
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    ns = ap.parse_args()

    c_text = preprocess(ns.cc, ns.hip_include, ("hip/hip_runtime_api.h",), "c")
    cxx_text = preprocess(ns.cxx, ns.hip_include, ("hip/hip_runtime_api.h", "hip/hip_ext.h"), "c++")
    variants = collect(c_text, cxx_text, ns.cxx, ns.hip_include)
    if not variants:
        raise SystemExit("gen_hip_gated_table: no gated prototypes found; wrong HIP headers?")
    version = hip_version(ns.hip_include)
    source = f"the HIP headers in {ns.hip_include}"
    rc = write_or_check(ns.output, render(variants, version), source, ns.check)
    rc |= write_or_check(ns.names, render_names(variants, version), source, ns.check)
    if not ns.check:
        print(f"wrote {ns.output}: {len(variants)} wrapped HIP entry points")
    return rc


if __name__ == "__main__":
    sys.exit(main())
