"""Framework timers replaced in Python: a candidate that rewrites what its
CUDA events report (`torch.cuda.Event.elapsed_time = lambda self, end: 0.01`),
how its harness waits (`torch.cuda.synchronize`), or the harness itself
(`triton.testing.do_bench = fake`) measures nothing the driver saw, and the
interception library cannot tell from below. Each entry of TIMERS is
checked at every region's release (tenant/integrity.py, `patched_now`), in
every process, with or without auto-regions: one found replaced taints that
region and every region the process releases after it (`patched_harness`,
docs/integrity.md).

A timer is replaced when what its module or class holds now is not what it
held when this process first looked (at a region's entry or release, the
module already imported), or when it does not look like the framework's
own: a function whose `__module__` is outside the framework's package or
whose `__qualname__` does not end with its name (a lambda, a function of the
candidate). auto-regions' wrapper (tenant/auto_region.py) stands for the
function it wraps. A builtin (a C method) is judged by identity alone.

Nothing is imported here: a module the process never imported is not
looked at (importing torch would cost seconds and change the process).
Standard library only.
"""

from __future__ import annotations

import sys
from typing import Any

TIMERS = (
    "torch.cuda:Event.elapsed_time",
    "torch.cuda:Event.record",
    "torch.cuda:Event.synchronize",
    "torch.cuda:Event.query",
    "torch.cuda:synchronize",
    "torch.cuda:Stream.synchronize",
    "torch.cuda:Stream.wait_stream",
    "triton.testing:do_bench",
    "triton.testing:do_bench_cudagraph",
    "torch.utils.benchmark:Timer.timeit",
    "torch.utils.benchmark:Timer.blocked_autorange",
    "torch.utils.benchmark:Timer.adaptive_autorange",
)
_WRAPPED_BY_AUTO_REGION = "__krex_auto_region__"  # tenant/auto_region.py's mark
_ABSENT = object()

# timer -> (its module then, what it was when first seen). A module imported
# anew (a pooled context process forgets the modules a command imported) is
# looked at afresh: its functions are new objects.
_originals: dict[str, tuple[Any, Any]] = {}


def _lookup(name: str) -> tuple[Any, Any]:
    """(the timer's module, what its module or class holds now, unwrapped);
    the value is _ABSENT when the module is not imported or has no such attribute."""
    module_name, _, path = name.partition(":")
    module: Any = sys.modules.get(module_name)
    return module, (_ABSENT if module is None else _held(module, path))


def _held(owner: Any, path: str) -> Any:
    """What `Class.attr` or `attr` of module `owner` is now, auto-regions' wrapper unwrapped."""
    *classes, attr = path.split(".")
    for cls in classes:
        # What the namespace holds, not getattr: a module's lazy __getattr__ would import.
        owner = vars(owner).get(cls) if not isinstance(owner, type) else getattr(owner, cls, None)
        if not isinstance(owner, type):
            return _ABSENT
    if isinstance(owner, type):
        # The class's own attribute (or a base's), as set: a staticmethod stays one.
        value = next((k.__dict__[attr] for k in owner.__mro__ if attr in k.__dict__), _ABSENT)
    else:
        value = getattr(owner, "__dict__", {}).get(attr, _ABSENT)
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if getattr(value, _WRAPPED_BY_AUTO_REGION, None):
        value = getattr(value, "__wrapped__", value)
    return value


def _looks_original(name: str, value: Any) -> bool:
    if getattr(value, "__code__", None) is None:
        return True  # a builtin or a C method: nothing in Python to tell by
    package = name.partition(":")[0].split(".")[0]
    module = getattr(value, "__module__", None) or ""
    qualname = getattr(value, "__qualname__", None) or ""
    attr = name.partition(":")[2].rpartition(".")[2]
    return (module == package or module.startswith(package + ".")) and qualname.rpartition(".")[2] == attr


def replaced() -> list[str]:
    """The timers replaced in this process as of now (remembering, for the
    later checks, those seen for the first time)."""
    found = []
    for name in TIMERS:
        module, value = _lookup(name)
        if value is _ABSENT:
            continue
        if name not in _originals or _originals[name][0] is not module:
            _originals[name] = (module, value)
        if value is not _originals[name][1] or not _looks_original(name, value):
            found.append(name)
    return found
