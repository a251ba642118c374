"""What a pooled command may change in its process, and how it is put back.

A `Baseline` is taken once, after the context is created; after each command
`restore` puts back sys.path, meta path and path hooks, argv, environment,
cwd, signal handlers and mask, timers, umask, CPU affinity, hooks, warnings
filters, the root logger, open files and imported modules, and says why the
process cannot serve again when something cannot be put back (a non-daemon
thread left running). Then `state.check()` (tenant/process_state.py) compares
module and class attributes and framework settings with the baseline, and
puts the random generators back.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
import threading
import warnings
from typing import Any

from krex_runtime.tenant.process_state import ProcessState


_UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP}


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
        self.affinity = os.sched_getaffinity(0)
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.recursion_limit = sys.getrecursionlimit()
        self.hooks = (sys.excepthook, sys.displayhook, sys.breakpointhook, threading.excepthook)
        self.warning_filters = list(warnings.filters)
        self.stdout, self.stderr, self.stdin = sys.stdout, sys.stderr, sys.stdin
        self.logging = _logging_state()
        self.state = ProcessState()  # last: everything above is part of it

    def restore(self, keep_dirs: list[str]) -> str:
        """Put the process back; returns why it cannot serve again ("" if it can)."""
        sys.settrace(None)
        sys.setprofile(None)
        threading.settrace(None)  # type: ignore[arg-type]
        threading.setprofile(None)  # type: ignore[arg-type]
        signal.alarm(0)
        for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
            signal.setitimer(timer, 0)
        for sig, handler in self.handlers.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError):
                pass
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        if dict(os.environ) != self.env:
            os.environ.clear()
            os.environ.update(self.env)
        os.chdir(self.cwd)
        sys.path[:] = self.path
        sys.meta_path[:] = self.meta_path
        sys.path_hooks[:] = self.path_hooks
        sys.argv[:] = self.argv
        sys.path_importer_cache.clear()
        sys.excepthook, sys.displayhook, sys.breakpointhook, threading.excepthook = self.hooks
        sys.setrecursionlimit(self.recursion_limit)
        warnings.filters[:] = self.warning_filters
        os.umask(self.umask)
        try:
            os.sched_setaffinity(0, self.affinity)
        except OSError:
            pass
        _restore_logging(self.logging)
        self._forget_modules(keep_dirs)
        importlib.invalidate_caches()
        gc.collect()
        self._close_fds()
        _reap_children()
        left = [t for t in threading.enumerate() if t not in self.threads and t.is_alive() and not t.daemon]
        if left:
            return "left a non-daemon thread running: " + ", ".join(t.name for t in left)
        return ""

    def _forget_modules(self, keep_dirs: list[str]) -> None:
        new = set(sys.modules) - self.modules
        sticky = {n.partition(".")[0] for n in new if _native_installed(sys.modules.get(n), keep_dirs)}
        for name in new:
            if name.partition(".")[0] in sticky:
                self.modules.add(name)
                continue
            module = sys.modules.pop(name, None)
            parent, _, child = name.rpartition(".")
            if parent and parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
                try:
                    delattr(sys.modules[parent], child)
                except AttributeError:
                    pass

    def _close_fds(self) -> None:
        for fd in _open_fds() - self.fds:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            # The driver may open device nodes and anonymous inodes lazily; they
            # belong to the context, not to the command.
            if target.startswith("/dev/") or target.startswith("anon_inode:") or target.startswith("/memfd:"):
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


def _native_installed(module: Any, command_dirs: list[str]) -> bool:
    """An extension module of an installed package (not one of the command's own)."""
    path = getattr(module, "__file__", None) or ""
    if not path.endswith((".so", ".pyd")):
        return False
    real = os.path.realpath(path)
    return not any(real.startswith(d + os.sep) for d in command_dirs if d)


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
