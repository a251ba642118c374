"""Reading the CUDA driver API out of cuda.h, for the generators of native/.

cuda.h is preprocessed with __CUDA_API_VERSION_INTERNAL, the mode in which it
declares every exported symbol under its real name (versioned, per-thread
stream and legacy), exactly as the driver's own build sees it. Python stdlib
only.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

PROTOTYPE = re.compile(r"\bCUresult\s+(cu[A-Z]\w*)\s*\(([^;{]*?)\)\s*;", re.DOTALL)
IDENT = re.compile(r"[A-Za-z_]\w*")


def base_name(name: str) -> str:
    """The name without its _ptsz/_ptds and _vN suffixes."""
    base = re.sub(r"_(ptsz|ptds)$", "", name)
    return re.sub(r"_v\d+$", "", base)


def split_params(params: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in params:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        out.append(tail)
    return out


def param_name(param: str, where: str) -> str:
    fp = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", param)  # function pointer
    if fp:
        return fp.group(1)
    idents = IDENT.findall(re.sub(r"\[.*?\]", "", param))
    if len(idents) < 2:
        raise SystemExit(f"parameter without a name in {where}: {param!r}")
    return idents[-1]


def preprocess(cc: str, include: str, headers: tuple[str, ...] = ("cuda.h",), defines: tuple[str, ...] = ()) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write("".join(f"#include <{h}>\n" for h in headers))
        src = f.name
    try:
        return subprocess.run(
            [cc, "-E", "-P", "-D__CUDA_API_VERSION_INTERNAL", *defines, f"-I{include}", src],
            check=True, capture_output=True, text=True,
        ).stdout
    finally:
        os.unlink(src)


def cuda_version(include: str) -> str:
    with open(os.path.join(include, "cuda.h"), encoding="utf-8", errors="replace") as f:
        m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", f.read())
    return m.group(1) if m else "unknown"
