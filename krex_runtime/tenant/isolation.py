"""What a pooled command may change in its process, and how it is put back.

A `Baseline` is taken once, after the context is created; after each command
`restore` puts back sys.path, meta path and path hooks, argv, environment
(os.environ and the C library's), cwd, stdin, signal handlers and mask,
timers, umask, CPU affinity, hooks, warnings filters, the root logger, open
files, imported modules and the process settings of
tenant/process_settings.py, and says why the process cannot serve again when
something cannot be put back:

  - a thread left running, of any kind: a Python thread (daemon or not), a
    thread that runs Python without `threading` knowing it, a native one. It
    would run on inside the next command (read its argv, patch what it
    measures with): the process is retired before that command starts;
  - an audit hook added (sys.addaudithook has no undo);
  - a package that stays loaded (native code) whose attributes the command
    bound to its own functions or classes;
  - a process setting that cannot be set back (seccomp, a hard limit lowered).

Then `state.check()` (tenant/process_state.py) compares module and class
attributes and framework settings with the baseline, and puts the random
generators back.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import stat
import sys
import threading
import time
import types
import warnings
from typing import Any, cast

from krex_runtime.tenant.process_settings import Settings
from krex_runtime.tenant.process_state import ProcessState

_UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP}
# A thread the command joined may still be leaving the kernel's list a moment
# after join() returned: how long to look again before it counts as left running.
THREAD_EXIT_WAIT_S = 0.2


class _AuditWatch:
    """sys.addaudithook cannot be undone: a hook a command adds would run
    inside every later command. This hook, the process's own, only notes
    that one was added (the process then retires)."""

    def __init__(self) -> None:
        self.added = 0
        sys.addaudithook(self._hook)

    def _hook(self, event: str, _args: Any) -> None:
        if event == "sys.addaudithook":
            self.added += 1


class Baseline:
    def __init__(self) -> None:
        self.modules = set(sys.modules)
        self.path = list(sys.path)
        self.meta_path = list(sys.meta_path)
        self.path_hooks = list(sys.path_hooks)
        self.argv = list(sys.argv)
        self.env = dict(os.environ)
        self.cwd = os.getcwd()
        self.handlers: dict[int, Any] = {}
        for sig in signal.valid_signals():
            if sig in _UNCATCHABLE:
                continue
            try:
                handler = signal.getsignal(sig)
            except (ValueError, OSError):
                continue
            if handler is not None:
                self.handlers[sig] = handler
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        self.fds = _open_fds()
        self.threads = set(threading.enumerate())
        self.thread_idents = {t.ident for t in self.threads} | set(sys._current_frames())
        self.tids = _tids()
        self.settings = Settings()
        self.audit = _AuditWatch()
        self.affinity = os.sched_getaffinity(0)
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.recursion_limit = sys.getrecursionlimit()
        self.hooks = (sys.excepthook, sys.displayhook, sys.breakpointhook, threading.excepthook)
        self.warning_filters = list(warnings.filters)
        self.stdout, self.stderr, self.stdin = sys.stdout, sys.stderr, sys.stdin
        self.logging = _logging_state()
        self.state = ProcessState()  # last: everything above is part of it

    def restore(self, keep_dirs: list[str]) -> tuple[str, str]:
        """Put the process back; (cause, why) when it cannot serve again, ("", "") when it can."""
        # First: with none of the command's threads left, nothing changes the
        # process while it is put back.
        left = self._threads_left()
        if left:
            return "threads", "left a thread running: " + ", ".join(left)
        sys.settrace(None)
        sys.setprofile(None)
        threading.settrace(None)
        threading.setprofile(None)
        signal.alarm(0)
        for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
            signal.setitimer(timer, 0)
        for sig, handler in self.handlers.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError):
                pass
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        planted = self._forget_modules(keep_dirs)
        importlib.invalidate_caches()
        # Finalisers of what the command left as garbage run now, not inside
        # the next command: what they change is put back or seen below.
        gc.collect()
        if dict(os.environ) != self.env:
            os.environ.clear()
            os.environ.update(self.env)
        changed = self.settings.put_back(self.env)
        _null_stdin()
        os.chdir(self.cwd)
        sys.path[:] = self.path
        sys.meta_path[:] = self.meta_path
        sys.path_hooks[:] = self.path_hooks
        sys.argv[:] = self.argv
        sys.path_importer_cache.clear()
        sys.excepthook, sys.displayhook, sys.breakpointhook, threading.excepthook = self.hooks
        sys.setrecursionlimit(self.recursion_limit)
        # In place: the C warnings module holds this list (a list, though typeshed says Sequence).
        cast("list[Any]", warnings.filters)[:] = self.warning_filters
        os.umask(self.umask)
        try:
            os.sched_setaffinity(0, self.affinity)
        except OSError:
            pass
        _restore_logging(self.logging)
        self._close_fds()
        _reap_children()
        left = self._threads_left()  # one a finaliser started
        if left:
            return "threads", "left a thread running: " + ", ".join(left)
        if self.audit.added:
            return "state-changed", "state-changed: sys.addaudithook (an audit hook cannot be removed)"
        if planted:
            return "state-changed", f"state-changed: {planted} (set by the command, in a package that stays loaded)"
        if changed:
            return "state-changed", changed
        return "", ""

    def _threads_left(self) -> list[str]:
        """Every thread the command left running, named; waits briefly for those on their way out."""
        deadline = time.monotonic() + THREAD_EXIT_WAIT_S
        while True:
            left = self._new_threads()
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.01)

    def _new_threads(self) -> list[str]:
        python = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
        names = [f"{t.name} (daemon)" if t.daemon else t.name for t in python]
        known = self.thread_idents | {t.ident for t in python}
        # Python run in a thread `threading` never saw (a ctypes callback of a native thread).
        names += [f"a thread running Python outside threading ({i})" for i in sys._current_frames() if i not in known]
        native = _tids() - self.tids - {t.native_id for t in python}
        if native:
            names.append(f"{len(native)} native thread(s) ({', '.join(sorted(_comm(t) for t in native))})")
        return names

    def _forget_modules(self, keep_dirs: list[str]) -> str:
        """Forget the command's modules; "module.attr" when a package that stays
        loaded has an attribute bound to a function or class of the command."""
        new = set(sys.modules) - self.modules
        sticky = {n.partition(".")[0] for n in new if _native_installed(sys.modules.get(n), keep_dirs)}
        kept = []
        commands = {"__main__"}
        for name in new:
            if name.partition(".")[0] in sticky:
                self.modules.add(name)
                kept.append(name)
                continue
            if _inside(getattr(sys.modules.get(name), "__file__", None), keep_dirs):
                commands.add(name)
            module = sys.modules.pop(name, None)
            parent, _, child = name.rpartition(".")
            if parent and parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
                try:
                    delattr(sys.modules[parent], child)
                except AttributeError:
                    pass
        for name in sorted(kept):
            planted = _planted(name, sys.modules.get(name), commands)
            if planted:
                return planted
        return ""

    def _close_fds(self) -> None:
        for fd in _open_fds() - self.fds:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            # The driver may open device nodes and anonymous inodes lazily; they
            # belong to the context, not to the command.
            if _driver_kind(fd, target):
                continue
            try:
                os.close(fd)
            except OSError:
                pass


def _reap_children() -> None:
    """Children the command left are ended by the runtime; collect their exit
    statuses so they do not pile up as zombies of a long-lived process."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _open_fds() -> set[int]:
    # The listing's own descriptor appears here too; it is closed by now and
    # skipped later because it can no longer be read.
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def _driver_kind(fd: int, target: str) -> bool:
    """A character device, an anonymous inode or a memfd: what a driver opens."""
    if target.startswith(("anon_inode:", "/memfd:")):
        return True
    try:
        return stat.S_ISCHR(os.fstat(fd).st_mode)
    except OSError:
        return False


def _null_stdin() -> None:
    """fd 0 is /dev/null between commands, whatever a command put there."""
    null = os.open(os.devnull, os.O_RDONLY)
    if null != 0:
        os.dup2(null, 0)
        os.close(null)


def _tids() -> set[int]:
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def _comm(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return str(tid)


def _inside(path: str | None, dirs: list[str]) -> bool:
    if not path:
        return False
    real = os.path.realpath(path)
    return any(real.startswith(d + os.sep) for d in dirs if d)


def _native_installed(module: Any, command_dirs: list[str]) -> bool:
    """An extension module of an installed package (not one of the command's own)."""
    path = getattr(module, "__file__", None) or ""
    if not path.endswith((".so", ".pyd")):
        return False
    return not _inside(path, command_dirs)


def _defined_in(value: Any) -> str | None:
    """The module a function, method, partial or class was defined in (None for other values)."""
    value = getattr(value, "__func__", value)
    value = getattr(value, "func", value) if type(value).__name__ == "partial" else value
    if isinstance(value, (types.FunctionType, type)):
        return getattr(value, "__module__", None)
    return None


def _planted(name: str, module: Any, commands: set[str]) -> str:
    """The first attribute of a module that stays loaded, or of a class it defines,
    that is a function or class of the command's own code ("" when none).
    A package the command imported first joins the baseline as it is now; what
    the command bound into it would otherwise run in every later command."""
    if not isinstance(module, types.ModuleType):
        return ""
    namespace = dict(vars(module))
    for attr, value in namespace.items():
        if _defined_in(value) in commands:
            return f"{name}.{attr}"
        if isinstance(value, type) and getattr(value, "__module__", None) == name:
            for cattr, cvalue in list(vars(value).items()):
                if _defined_in(cvalue) in commands:
                    return f"{name}.{attr}.{cattr}"
    return ""


def _logging_state() -> Any:
    logging = sys.modules.get("logging")
    if logging is None:
        return None
    root = logging.getLogger()
    return (list(root.handlers), root.level, set(logging.Logger.manager.loggerDict), logging.root.manager.disable)


def _restore_logging(saved: Any) -> None:
    logging = sys.modules.get("logging")
    if saved is None or logging is None:
        return
    handlers, level, names, disabled = saved
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.disable(disabled)
    for name in set(logging.Logger.manager.loggerDict) - names:
        del logging.Logger.manager.loggerDict[name]
