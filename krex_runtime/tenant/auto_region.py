"""Auto-regions: well-known timing harnesses run inside a region, unmodified.

A candidate that times its kernels with `triton.testing.do_bench`,
`torch.utils.benchmark.Timer` or `cupyx.profiler.benchmark` gets the same
protection as one that wrote `with region():` around its timing loop: each
call of those entry points (and of the operator's and submitter's own,
`module:function` or `module:Class.method`) runs inside a region.

How it gets into the tenant, without touching the candidate: this file's
source is also the tenant's `sitecustomize` (tenant/python_path.py writes it
into `<run_dir>/tenant-python/startup/`, which commands/environment.py puts
first on PYTHONPATH of a command with auto-regions on). At start-up it

- runs the user's own `sitecustomize` (and the interpreter then runs their
  `usercustomize`): the next `sitecustomize` on sys.path past this folder,
  executed as the `sitecustomize` module, as Python would have;
- puts a finder first on `sys.meta_path` that only answers for the
  harnesses' module names: it finds the module with the other finders and
  wraps the entry points once the module has executed. Nothing is imported
  for a harness that the command never imports, and this file imports only
  `os` and `sys` (both loaded before any sitecustomize), so a command that
  never imports one runs what it ran before.

A pooled command's context process was started long before the command:
there the command runner calls `activate(env)` (and its undo after the
command), which also wraps harnesses already imported.

Nested regions are one region (tenant/region.py): a wrapped harness inside
the user's own `region()`, or one wrapped harness calling another.

What was wrapped is appended, one `module:attr` a line, to the file named by
KREX_AUTO_REGION_REPORT; the runtime puts it in the command's result.

A harness replaced after import (`triton.testing.do_bench = fake`, a new
`__code__` on the original, a class's method set anew) is flagged in the
measurement integrity of every region the process releases after it
(tenant/integrity.py, docs/integrity.md): a module's attribute is watched as
it is set (the module's class becomes a subclass that notices), a wrapped
function's code is compared at each call, and every wrapped attribute is
checked at each release.

Standard library only, and no import at module level but `os` and `sys`
(what its types name is imported for the type checker alone).
"""

import os
import sys

TYPE_CHECKING = False  # true to a type checker, which reads the imports below
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from importlib.abc import Loader as _LoaderBase
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

    Targets = dict[str, list[list[str]]]  # module name -> [[function] | [Class, method]]
else:
    ModuleType = type(sys)
    _LoaderBase = object

ENABLED = "KREX_AUTO_REGION"  # "1": wrap (tenant/env.py names them too)
ENTRIES = "KREX_AUTO_REGION_ENTRIES"  # more entry points, comma-separated
REPORT = "KREX_AUTO_REGION_REPORT"  # where the wrapped entry points are listed

BUILT_IN = (
    "triton.testing:do_bench",
    "triton.testing:do_bench_cudagraph",
    "torch.utils.benchmark:Timer.timeit",
    "torch.utils.benchmark:Timer.blocked_autorange",
    "torch.utils.benchmark:Timer.adaptive_autorange",
    "cupyx.profiler:benchmark",
)

_MARK = "__krex_auto_region__"


def parse_entry(text: str) -> "tuple[str, list[str]]":
    """`module:function` or `module:Class.method` -> (module, ["Class", "method"]).
    ValueError, with a one-line reason, for anything else."""
    module, sep, attr = text.strip().partition(":")
    parts = attr.split(".") if attr else []
    names = module.split(".") + parts
    if not sep or not parts or len(parts) > 2 or not all(n.isidentifier() for n in names):
        raise ValueError(f"auto-region entry {text!r} is not module:function or module:Class.method")
    return module, parts


def entries_of(env: "Mapping[str, str]") -> "Targets":
    """The entry points of a command: the built-in ones, then its own."""
    extra = [e for e in env.get(ENTRIES, "").split(",") if e.strip()]
    targets: Targets = {}
    for text in (*BUILT_IN, *extra):
        try:
            module, parts = parse_entry(text)
        except ValueError as exc:
            print(f"krex: {exc}; ignored", file=sys.stderr)
            continue
        targets.setdefault(module, []).append(parts)
    return targets


def _note_patched(name: str) -> None:
    try:
        from krex_runtime.tenant import integrity
    except ImportError:  # the runtime's package is not importable here: nothing to tell
        return
    integrity.note_patched(name)


def _wrapper(original: "Callable[..., Any]", name: str) -> "Callable[..., Any]":
    code = getattr(original, "__code__", None)

    def timed_in_a_region(*args: "Any", **kwargs: "Any") -> "Any":
        from krex_runtime.tenant.region import region

        if code is not None and getattr(original, "__code__", None) is not code:
            _note_patched(name)  # the original's code was replaced after import
        with region():
            return original(*args, **kwargs)

    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(timed_in_a_region, attr, getattr(original, attr))
        except (AttributeError, TypeError):
            pass
    for attr, value in (("__wrapped__", original), (_MARK, name)):
        setattr(timed_in_a_region, attr, value)
    return timed_in_a_region


def _class_attr(cls: type, attr: str) -> "Any":
    for klass in cls.__mro__:
        if attr in klass.__dict__:
            return klass.__dict__[attr]
    return None


class _Hook:
    """The wrapping of one command's entry points; `undo` puts them back."""

    def __init__(self, targets: "Targets", report: str) -> None:
        self.targets = targets
        self.report = report
        self.done: list[tuple[Any, str, Any, str]] = []  # (owner, attr, what it was, its name) for undo
        self.checked = False  # its check runs at each release (once it wrapped something)

    def wrap_module(self, module: "ModuleType") -> None:
        for parts in self.targets.get(module.__name__, ()):
            owner: Any = module
            for part in parts[:-1]:
                owner = getattr(owner, part, None)
            attr = parts[-1]
            # On a class: what its own dict (or a base's) holds, so that a
            # staticmethod or classmethod stays one.
            raw: Any = _class_attr(owner, attr) if isinstance(owner, type) else getattr(owner, attr, None)
            func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
            if owner is None or func is None or getattr(func, _MARK, None) or not callable(func):
                continue  # absent in this version of the harness, or wrapped already
            name = f"{module.__name__}:{'.'.join(parts)}"
            wrapped = _wrapper(func, name)
            try:
                setattr(owner, attr, type(raw)(wrapped) if func is not raw else wrapped)
            except (AttributeError, TypeError):
                continue  # a read-only owner (an extension type): left as it is
            self.done.append((owner, attr, raw, name))
            self._tell(name)
            if owner is module:
                _guard(module)
            if not self.checked:
                self.checked = _register_check(self.check)

    def check(self) -> None:
        """At a release: each wrapped attribute still ours, else flagged."""
        for owner, attr, _raw, name in self.done:
            now = _class_attr(owner, attr) if isinstance(owner, type) else owner.__dict__.get(attr)
            now = now.__func__ if isinstance(now, (staticmethod, classmethod)) else now
            if not getattr(now, _MARK, None):
                _note_patched(name)

    def _tell(self, name: str) -> None:
        if not self.report:
            return
        try:
            # Non-blocking: the report is a pipe the runtime drains; with no
            # runtime reading it the open fails rather than waits.
            fd = os.open(self.report, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
        except OSError:
            return  # no report: the runtime did not ask for one, or is gone
        try:
            os.write(fd, name.encode() + b"\n")
        except OSError:
            pass  # a report left full: this line is lost, the command goes on
        finally:
            os.close(fd)

    def undo(self) -> None:
        if self.checked:
            self.checked = not _unregister_check(self.check)
        while self.done:
            owner, attr, raw, _name = self.done.pop()
            try:
                if isinstance(owner, _Guarded):
                    _unguard(owner)  # no longer watched: putting back is no patch
                setattr(owner, attr, raw)
            except (AttributeError, TypeError):
                pass


class _Guarded(ModuleType):
    """A harness module whose wrapped attributes are watched: setting one to
    anything but a wrapper is a patched harness."""

    def __setattr__(self, attr: str, value: "Any") -> None:
        current = self.__dict__.get(attr)
        name = getattr(current, _MARK, None)
        if name and not getattr(value, _MARK, None):
            _note_patched(name)
        super().__setattr__(attr, value)


def _guard(module: "ModuleType") -> None:
    if type(module) is type(sys):  # a module of its own class is left alone
        try:
            module.__class__ = _Guarded
        except TypeError:
            pass


def _unguard(module: "ModuleType") -> None:
    module.__class__ = ModuleType


class _Loader(_LoaderBase):
    """The module's own loader, and the wrapping once the module has executed."""

    def __init__(self, loader: "_LoaderBase", hook: _Hook) -> None:
        self._loader = loader
        self._hook = hook

    def __getattr__(self, name: str) -> "Any":
        return getattr(self._loader, name)

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: "ModuleType") -> None:
        spec = module.__spec__
        assert spec is not None, "a module being executed has its spec"
        spec.loader = self._loader
        try:
            module.__loader__ = self._loader
        except AttributeError:
            pass
        self._loader.exec_module(module)
        self._hook.wrap_module(module)


class _Finder:
    """First on sys.meta_path; answers only for the harnesses' modules."""

    def __init__(self, hook: _Hook) -> None:
        self.hook = hook

    def find_spec(self, name: str, path: "Sequence[str] | None" = None,
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if name not in self.hook.targets:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, self.hook)
                return spec
        return None


def activate(env: "Mapping[str, str]") -> "Callable[[], None] | None":
    """Wrap the entry points of a command with auto-regions on (`env` has
    KREX_AUTO_REGION=1): those of harnesses already imported now, the others
    when they are. Returns the undo, or None when auto-regions are off."""
    if env.get(ENABLED) != "1":
        return None
    hook = _Hook(entries_of(env), env.get(REPORT, ""))
    for name in hook.targets:
        module = sys.modules.get(name)
        if module is not None:
            hook.wrap_module(module)
    finder = _Finder(hook)
    sys.meta_path.insert(0, finder)

    def undo() -> None:
        try:
            sys.meta_path.remove(finder)
        except ValueError:
            pass
        hook.undo()
        _forget_patched()  # a pooled context process's next command starts untainted

    return undo


def _register_check(check: "Callable[[], None]") -> bool:
    """True once `check` runs at each release (the runtime's package is importable)."""
    try:
        from krex_runtime.tenant import integrity
    except ImportError:
        return False
    integrity.release_checks.append(check)
    return True


def _forget_patched() -> None:
    integrity = sys.modules.get("krex_runtime.tenant.integrity")
    if integrity is not None:
        integrity.patched_harnesses.clear()


def _unregister_check(check: "Callable[[], None]") -> bool:
    try:
        from krex_runtime.tenant import integrity

        integrity.release_checks.remove(check)
    except (ImportError, ValueError):
        pass
    return True


def _chain_user_sitecustomize() -> None:
    """Run the next `sitecustomize` on sys.path past this file's folder, as
    the `sitecustomize` module, so a tenant's own start-up code still runs."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    for finder in sys.meta_path:
        if getattr(finder, "__name__", "") != "PathFinder":  # the one that searches a path
            continue
        spec = finder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None or os.path.dirname(os.path.abspath(spec.origin or "")) == here:
            continue
        module = type(sys)("sitecustomize")
        module.__spec__, module.__loader__, module.__file__ = spec, spec.loader, spec.origin
        sys.modules["sitecustomize"] = module  # the user's code sees itself as sitecustomize
        spec.loader.exec_module(module)
        return


if __name__ == "sitecustomize":
    try:
        _chain_user_sitecustomize()
    finally:
        activate(os.environ)
