"""Which timing and checking functions the candidate replaced
(`harness_patched`): each watched name is looked up before the candidate is
imported and again at the end, and a name whose object is no longer the same
one is reported. The harness's own timer does not use them; a candidate that
replaces them is still telling the other timers of its process (and its own
benchmarks) something false, which the client holds against its result.

A name that does not exist (no Triton) is watched as absent: appearing is a
change too. Classes are watched themselves as well as their methods, so a
replaced class is seen even when its replacement inherits the methods.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

WATCHED = (
    "torch.cuda.Event",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.record",
    "torch.cuda.Event.synchronize",
    "torch.cuda.synchronize",
    "torch.cuda.Stream",
    "torch.cuda.Stream.synchronize",
    "torch.cuda.Stream.wait_stream",
    "torch.allclose",
    "triton.testing.do_bench",
    "krex_runtime.eval.harness.event_timer.DriverTimer.time",
)
_ABSENT = object()
Snapshot = dict[str, Any]


def _resolve(name: str) -> Any:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):  # the longest prefix that is a loaded module, then attributes
        module = sys.modules.get(".".join(parts[:cut]))
        if module is not None:
            obj: Any = module
            for attr in parts[cut:]:
                obj = getattr(obj, attr, _ABSENT)
                if obj is _ABSENT:
                    return _ABSENT
            return obj
    return _ABSENT


def import_triton_testing() -> None:
    """Import triton.testing when it is installed, so that its do_bench is
    seen as it was before the candidate ran (no Triton: nothing)."""
    try:
        if importlib.util.find_spec("triton") is not None:
            importlib.import_module("triton.testing")
    except Exception:
        pass  # a broken Triton install is the candidate's problem, not the watch's


def snapshot() -> Snapshot:
    return {name: _resolve(name) for name in WATCHED}


def replaced(before: Snapshot) -> list[str]:
    """The watched names whose object differs from `before`'s."""
    return [name for name in WATCHED if _resolve(name) is not before.get(name, _ABSENT)]
