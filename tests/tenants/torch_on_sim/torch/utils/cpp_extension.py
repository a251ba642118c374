"""Stand-in for torch.utils.cpp_extension.load_inline: a REAL compile, of C.

torch writes the sources into `$TORCH_EXTENSIONS_DIR/<name>/`, builds them
with ninja (nvcc, c++) into `<name>.so`, imports it as a Python module, and
reuses the build while the sources are unchanged. This stand-in does the
same with the host C compiler (`cc`), since CI has no nvcc:

- the sources go to `<root>/<name>/<name>.c`: a short prelude (stddef.h,
  math.h), then `cpp_sources`, then `cuda_sources`, all read as C;
- each function named in `functions` must be
  `void NAME(long n, float *out, const float *a, const float *b, ...)`:
  elementwise over float32 tensors of one shape, `n` elements, `out` the
  output, then one pointer per input tensor;
- the library is `<name>_<hash>.so`, `<hash>` the first 16 hex digits of
  the sources' sha256: built once, reused while the sources are the same
  (the file is built under a temporary name and renamed, so two processes
  building at once never load half a library);
- a failed compile raises RuntimeError("Error building extension
  '<name>': <the compiler's output>"), as torch's does with ninja's output;
- the module returned has one Python function per name: it checks that
  its arguments are float32 tensors of one shape with values, makes the
  output like the first input, launches ONE simulated kernel on the current
  stream (the elementwise duration, torch/_tensor.py) and calls the C
  function on the numpy buffers (ctypes).

The folder is `build_directory` when given (as torch's), else
`<root>/<name>`, `<root>` being TORCH_EXTENSIONS_DIR, else
`<tmp>/torch_extensions_<uid>` (torch's default is the user's cache folder,
~/.cache/torch_extensions).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from torch._tensor import Tensor, elementwise_ns

PRELUDE = "#include <stddef.h>\n#include <math.h>\n"
COMPILER = os.environ.get("CC", "cc")


def _root() -> str:
    return os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(tempfile.gettempdir(),
                                                                   f"torch_extensions_{os.getuid()}")


def _joined(sources: str | Sequence[str] | None) -> str:
    if sources is None:
        return ""
    return sources if isinstance(sources, str) else "\n".join(sources)


def _build(name: str, folder: str, source: str, verbose: bool) -> str:
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    library = os.path.join(folder, f"{name}_{digest}.so")
    if os.path.exists(library):
        return library  # unchanged sources: torch reuses its build too
    os.makedirs(folder, mode=0o700, exist_ok=True)
    c_file = os.path.join(folder, f"{name}.c")
    with open(c_file, "w") as f:
        f.write(source)
    partial = f"{library}.{os.getpid()}.tmp"
    cmd = [COMPILER, "-O2", "-shared", "-fPIC", "-Wall", "-o", partial, c_file, "-lm"]
    if verbose:
        print(" ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        output = f"[1/1] {' '.join(cmd)}\nFAILED: {os.path.basename(library)}\n{done.stdout}{done.stderr}"
        raise RuntimeError(f"Error building extension '{name}': {output}")
    os.replace(partial, library)
    return library


def _wrapper(library: ctypes.CDLL, fname: str) -> Callable[..., Tensor]:
    c_function = getattr(library, fname)
    c_function.restype = None

    def call(*tensors: Any) -> Tensor:
        if not tensors or not all(isinstance(t, Tensor) for t in tensors):
            raise TypeError(f"{fname}(): incompatible function arguments: tensors expected")
        first = tensors[0]
        for t in tensors:
            if t.dtype != "float32" or t.shape != first.shape or not t.valued:
                raise RuntimeError(f"{fname}: expected float32 tensors of shape {first.shape} with values, "
                                   f"got {t.dtype} {t.shape}")
        out = Tensor(first.shape, "float32", first.device, np.zeros(first.shape, dtype=np.float32))
        first._launch(elementwise_ns(first.shape))
        buffers = [np.ascontiguousarray(t._data) for t in tensors]
        as_float = ctypes.POINTER(ctypes.c_float)
        c_function(ctypes.c_long(first.numel()), out._data.ctypes.data_as(as_float),
                   *(b.ctypes.data_as(as_float) for b in buffers))
        return out

    call.__name__ = fname
    return call


def load_inline(name: str, cpp_sources: str | Sequence[str], cuda_sources: str | Sequence[str] | None = None,
                functions: str | Sequence[str] | None = None, extra_cflags: object = None,
                extra_cuda_cflags: object = None, extra_ldflags: object = None, extra_include_paths: object = None,
                build_directory: str | None = None, verbose: bool = False, **_: Any) -> types.ModuleType:
    source = PRELUDE + _joined(cpp_sources) + "\n" + _joined(cuda_sources) + "\n"
    folder = build_directory or os.path.join(_root(), name)
    library = ctypes.CDLL(_build(name, folder, source, verbose))
    module = types.ModuleType(name)
    names = [functions] if isinstance(functions, str) else list(functions or [])
    for fname in names:
        setattr(module, fname, _wrapper(library, fname))
    return module
