"""A context process's settings that no module attribute shows, put back after each command.

The kernel keeps some per process or per thread (resource limits, nice value,
scheduler, timer slack, the prctl flags), the C library some (locale, the C
environment, which `os.putenv` changes behind `os.environ`'s back), the
interpreter some (the collector's switches and callbacks, the switch
interval, faulthandler, the signal wakeup fd). A pooled command may change
any of them, and the next command would run under them: a timer slack of a
second stretches every sleep, a lowered RLIMIT_CPU kills it, a gc callback
runs inside it. `Settings` reads them all with the baseline and, after each
command, sets back what differs and reads it again; what cannot be set back
(a hard limit lowered, seccomp, no_new_privs, a nice value an unprivileged
process cannot lower again) retires the process: "state-changed: seccomp".

Standard library only, like all tenant-side code.
"""

from __future__ import annotations

import _locale
import ctypes
import faulthandler
import gc
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

_PR_SET_PDEATHSIG, _PR_GET_PDEATHSIG = 1, 2
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4
_PR_GET_SECCOMP = 21
_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
_PR_GET_NO_NEW_PRIVS = 39

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _prctl_value(option: int) -> int:
    return int(_prctl(option, 0, 0, 0, 0))


def _prctl_into(option: int) -> int:
    out = ctypes.c_int(0)
    _prctl(option, ctypes.addressof(out), 0, 0, 0)
    return out.value


def _prctl_set(option: int) -> Callable[[int], None]:
    def set_(value: int) -> None:
        if _prctl(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return set_


def _wakeup_fd() -> int:
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd


def _gc_enabled(on: bool) -> None:
    gc.enable() if on else gc.disable()


def _faulthandler(on: bool) -> None:
    faulthandler.enable() if on else faulthandler.disable()


def _scheduler() -> tuple[int, int]:
    return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority


def _set_scheduler(saved: tuple[int, int]) -> None:
    os.sched_setscheduler(0, saved[0], os.sched_param(saved[1]))


# name -> (getter, setter or None where a change cannot be undone)
Setting = tuple[Callable[[], Any], "Callable[[Any], object] | None"]  # a setter's return is not used


def _settings() -> dict[str, Setting]:
    table: dict[str, Setting] = {
        "nice": (lambda: os.getpriority(os.PRIO_PROCESS, 0), lambda v: os.setpriority(os.PRIO_PROCESS, 0, v)),
        "scheduler": (_scheduler, _set_scheduler),
        "timer slack": (lambda: _prctl_value(_PR_GET_TIMERSLACK), _prctl_set(_PR_SET_TIMERSLACK)),
        "dumpable": (lambda: _prctl_value(_PR_GET_DUMPABLE), _prctl_set(_PR_SET_DUMPABLE)),
        "parent-death signal": (lambda: _prctl_into(_PR_GET_PDEATHSIG), _prctl_set(_PR_SET_PDEATHSIG)),
        "child subreaper": (lambda: _prctl_into(_PR_GET_CHILD_SUBREAPER), _prctl_set(_PR_SET_CHILD_SUBREAPER)),
        "no_new_privs": (lambda: _prctl_value(_PR_GET_NO_NEW_PRIVS), None),
        "seccomp": (lambda: _prctl_value(_PR_GET_SECCOMP), None),
        "locale": (lambda: _locale.setlocale(_locale.LC_ALL, None), lambda v: _locale.setlocale(_locale.LC_ALL, v)),
        "gc.isenabled()": (gc.isenabled, _gc_enabled),
        "gc.get_threshold()": (gc.get_threshold, lambda v: gc.set_threshold(*v)),
        "gc.get_debug()": (gc.get_debug, gc.set_debug),
        "gc.callbacks": (lambda: list(gc.callbacks), lambda v: gc.callbacks.__setitem__(slice(None), v)),
        "sys.getswitchinterval()": (sys.getswitchinterval, sys.setswitchinterval),
        "sys.get_int_max_str_digits()": (sys.get_int_max_str_digits, sys.set_int_max_str_digits),
        "sys.getdlopenflags()": (sys.getdlopenflags, sys.setdlopenflags),
        "sys.get_asyncgen_hooks()": (lambda: tuple(sys.get_asyncgen_hooks()), lambda v: sys.set_asyncgen_hooks(*v)),
        "sys.get_coroutine_origin_tracking_depth()": (
            sys.get_coroutine_origin_tracking_depth, sys.set_coroutine_origin_tracking_depth,
        ),
        "threading.stack_size()": (threading.stack_size, threading.stack_size),
        "faulthandler.is_enabled()": (faulthandler.is_enabled, _faulthandler),
        "signal.set_wakeup_fd()": (_wakeup_fd, signal.set_wakeup_fd),
    }
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            which = getattr(resource, name)
            table[name] = (partial(resource.getrlimit, which), partial(resource.setrlimit, which))
    return table


def _same(a: Any, b: Any) -> bool:
    """Equal values; lists and tuples of callables (gc.callbacks, hooks) by identity."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(x is y or (not callable(x) and x == y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


class Settings:
    """Taken with the baseline; `put_back` after each command."""

    def __init__(self) -> None:
        self._table = _settings()
        self.saved: dict[str, Any] = {}
        for name, (get, _set) in self._table.items():
            try:
                self.saved[name] = get()
            except (OSError, ValueError, RuntimeError):
                continue  # not on this kernel or build: not compared

    def put_back(self, environ: dict[str, str]) -> str:
        """Set back what differs; "state-changed: NAME" for the first that cannot be, else ""."""
        # Whatever a command left armed goes: faulthandler's watchdog thread and
        # its signal handlers are not Python handlers that Baseline puts back.
        faulthandler.cancel_dump_traceback_later()
        for sig in signal.valid_signals():
            try:
                faulthandler.unregister(sig)
            except (ValueError, RuntimeError, OSError):
                continue
        put_back_c_environ(environ)
        for name, was in self.saved.items():
            get, set_ = self._table[name]
            try:
                if _same(get(), was):
                    continue
                if set_ is None:
                    return f"state-changed: {name}"
                set_(was)
                if not _same(get(), was):
                    return f"state-changed: {name}"
            except (OSError, ValueError, TypeError, RuntimeError):
                return f"state-changed: {name}"
        return ""


def c_environ() -> dict[bytes, bytes]:
    """The C library's environment (what a child started with execv inherits)."""
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(_libc, "environ")
    out: dict[bytes, bytes] = {}
    i = 0
    while env and env[i] is not None:
        key, _, value = env[i].partition(b"=")
        out.setdefault(key, value)
        i += 1
    return out


def put_back_c_environ(environ: dict[str, str]) -> None:
    """Make the C environment `environ` again: `os.putenv` and C code change it
    without `os.environ` knowing, and a command's children inherit it."""
    wanted = {os.fsencode(k): os.fsencode(v) for k, v in environ.items()}
    now = c_environ()
    for key in now.keys() - wanted.keys():
        try:
            os.unsetenv(key)
        except (OSError, ValueError):
            continue
    for key, value in wanted.items():
        if now.get(key) != value:
            os.putenv(key, value)
