"""The process-wide state of a context process that one command could pass to the next.

`ProcessState` is taken with the baseline, after the context is created: the
attributes of every module imported by then (each value by identity, never by
`==`), the attributes of the classes those modules define, and the settings
and generator states of the frameworks imported by then
(tenant/framework_state.py). After each command, once isolation.Baseline has
put back what it puts back and forgotten the command's own modules, `check`
compares:

  - a module or class attribute rebound, added or deleted: a monkeypatch
    (`torch.nn.functional.gelu = ...`, `builtins.x = ...`, `torch.Tensor.add =
    ...`). Putting the binding back would not undo what was built from it
    meanwhile, so the process is retired: "state-changed: torch.nn.functional.gelu";
  - a framework setting that differs: "state-changed:
    torch.backends.cudnn.benchmark"; except those a framework reads on
    every use (its `put_back`: torch's matmul precision flags), which are
    set back and read again;
  - except caches that the interpreter and the standard library fill in as a
    matter of course (QUIET), and private attributes that were None at the
    baseline (lazily filled caches): those are put back without a word. A
    cache of some framework that shows up as `state-changed: ...` belongs
    in QUIET (or is filled before the baseline: cuda_context.py).

Random generators are put back, never compared: those a fresh process seeds
from the OS are seeded from the OS again (Python's `random`, NumPy's legacy
generator, torch's CPU generator in current releases), those that start from
a fixed seed (torch's, where its seed is torch's default) get the baseline's
state, which is that of a fresh process that imported the same modules.

Checking runs after the command's `done` has been sent, off its critical path.
"""

from __future__ import annotations

import operator
import sys
import types
from typing import Any

from krex_runtime.tenant.framework_state import Framework, frameworks, reseed_all

MISSING = object()

# Put back without a word: what the interpreter and the standard library change
# as a matter of course. A name alone: in every module or class; "module.name":
# in that module only; "module.*": every attribute of that module.
QUIET = frozenset({
    "__warningregistry__",  # warnings' per-module "already shown" registry
    "__annotations__",  # created on first access
    "__slotnames__",  # copyreg's cache, filled by copy and pickle
    "sys.*",  # sys is restored as a whole (last_exc, last_traceback, ...)
    "builtins._",  # the interactive last result
    "tempfile.tempdir", "tempfile._name_sequence",  # tempfile's lazily made defaults
    "_frozen_importlib_external._NamespacePath._epoch",  # counts importlib.invalidate_caches()
    # pynvml's handle of libnvidia-ml and its count of nvmlInit calls: a command
    # that read the SM clock leaves them set. Put back, the next command's
    # nvmlInit loads and counts again, as in a fresh process (NVML keeps its
    # own count, so a command that left it initialised changes nothing seen).
    "pynvml.nvmlLib", "pynvml._nvmlLib_refcount",
})


class _Snapshot:
    """One namespace's bindings: keys in order and values by identity."""

    __slots__ = ("keys", "owner", "values")

    def __init__(self, owner: Any, namespace: Any) -> None:
        self.owner = owner
        self.keys = tuple(namespace)
        self.values = tuple(namespace.values())

    def same(self, namespace: Any) -> bool:
        return tuple(namespace) == self.keys and all(map(operator.is_, namespace.values(), self.values))

    def saved(self) -> dict[str, Any]:
        return dict(zip(self.keys, self.values, strict=False))


def _quiet(owner: str, attr: str, was: Any = MISSING) -> bool:
    """Whether a change of `owner.attr` (from `was`) is put back without a word.
    A private attribute that was None at the baseline is a lazily filled
    cache (torch.backends.cudnn's `__cudnn_version`): emptied again, it is
    filled again when next needed."""
    module = owner.partition(".")[0]
    if was is None and attr.startswith("_"):
        return True
    return attr in QUIET or f"{owner}.{attr}" in QUIET or f"{module}.*" in QUIET


def _differing(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    return [k for k in sorted(set(before) | set(now)) if before.get(k, MISSING) != now.get(k, MISSING)]


class ProcessState:
    def __init__(self) -> None:
        self.modules: dict[str, _Snapshot] = {}
        self.classes: dict[str, _Snapshot] = {}
        self.adopt()
        self.frameworks: list[Framework] = frameworks()
        self.settings: dict[str, dict[str, Any]] = {}
        self.rng: dict[str, Any] = {}
        for f in self.frameworks:
            try:
                self.settings[f.name] = f.settings()
                if f.save_rng is not None:
                    self.rng[f.name] = f.save_rng()
            except Exception:  # one framework that cannot be read must not stop the process
                continue

    def adopt(self) -> None:
        """Take every module in sys.modules that is not yet part of the baseline
        (at start: all of them; later: extension modules that stay loaded)."""
        for name, module in list(sys.modules.items()):
            if name in self.modules or not isinstance(module, types.ModuleType):
                continue
            namespace = vars(module)
            self.modules[name] = _Snapshot(module, namespace)
            for attr, value in list(namespace.items()):
                if isinstance(value, type) and getattr(value, "__module__", None) == name:
                    self.classes.setdefault(f"{name}.{attr}", _Snapshot(value, vars(value)))

    def check(self) -> str:
        """Put back what can be; "state-changed: WHAT" when something cannot, "" otherwise."""
        changed = self._namespaces() or self._settings()
        self._restore_rng()
        self.adopt()
        return f"state-changed: {changed}" if changed else ""

    def _namespaces(self) -> str:
        for name, snap in self.modules.items():
            if sys.modules.get(name) is not snap.owner:
                sys.modules[name] = snap.owner  # sys.modules is sys state: put back
            namespace = vars(snap.owner)
            if not snap.same(namespace):
                what = self._differences(name, snap, namespace, module=True)
                if what:
                    return what
        for name, snap in self.classes.items():
            namespace = vars(snap.owner)
            if not snap.same(namespace):
                what = self._differences(name, snap, namespace, module=False)
                if what:
                    return what
        return ""

    def _differences(self, owner: str, snap: _Snapshot, namespace: Any, module: bool) -> str:
        """The first difference that cannot be put back quietly; quiet ones are put back."""
        saved = snap.saved()
        target = snap.owner
        for attr in [a for a in saved if namespace.get(a, MISSING) is not saved[a]] + [a for a in namespace if a not in saved]:
            value = namespace.get(attr, MISSING)
            if module and isinstance(value, types.ModuleType) and sys.modules.get(value.__name__) is value:
                continue  # an extension submodule that stays loaded (adopted below)
            if not _quiet(owner, attr, saved.get(attr, MISSING)):
                return f"{owner}.{attr}"
            try:
                if attr in saved:
                    setattr(target, attr, saved[attr])
                else:
                    delattr(target, attr)
            except (AttributeError, TypeError):
                return f"{owner}.{attr}"
        # What stays (extension submodules) is part of the baseline from now on.
        replaced = _Snapshot(target, vars(target))
        (self.modules if module else self.classes)[owner] = replaced
        return ""

    def _settings(self) -> str:
        for f in self.frameworks:
            before = self.settings.get(f.name, {})
            try:
                changed = _differing(before, f.settings())
                if not changed:
                    continue
                # Put back what may be (every changed setting named in
                # put_back and known at the baseline), then read again: what
                # still differs, or anything else, retires the process.
                blocked = [k for k in changed if k not in f.put_back or k not in before]
                if blocked:
                    return blocked[0].removesuffix("()")
                first = [k for k in changed if k not in f.fallback]
                for attempt in (first, changed) if first != changed else (changed,):
                    for key in attempt:
                        setter = f.put_back[key]
                        if setter is not None:
                            setter(before[key])
                    still = _differing(before, f.settings())
                    if not still:
                        break
            except Exception as exc:
                return f"{f.name} settings unreadable or not put back ({type(exc).__name__})"
            if still:
                return still[0].removesuffix("()")
        return ""

    def _restore_rng(self) -> None:
        for f in self.frameworks:
            if f.restore_rng is not None and f.name in self.rng:
                try:
                    f.restore_rng(self.rng[f.name])
                except Exception:
                    continue
        reseed_all(frameworks())
