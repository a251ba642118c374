"""The main of a persistent context process: one pooled command at a time.

The runtime starts this module (`python -P -m krex_runtime.tenant.context_worker
SPEC`) with the tenant environment of its GPU, in a cgroup of its own, with a
control socket inherited as a file descriptor. It imports the configured
modules and creates its CUDA context once, reports `ready`, then serves `run`
messages. Each `run` brings the write ends of two pipes (SCM_RIGHTS); they
become fd 1 and 2 while the command runs, so the runtime pumps its output the
same way as a process command's.

Control messages are JSON lines:
    runtime -> worker: {"type": "run", "id", "entry", "cwd", "env"}  (+ 2 fds)
    worker -> runtime: {"type": "imported", "import_s"}              (start-up)
    runtime -> worker: {"type": "create"}                  (its turn to create its context)
    worker -> runtime: {"type": "ready", "startup_s", "context"}
                       {"type": "failed", "reason"}                 (start-up)
                       {"type": "done", "exit_code", "signal", "state", "reason"}
                       {"type": "clean", "ok", "cause", "reason"}   (after cleanup)

`done` comes as soon as the command's own work (including its atexit
handlers) is over, so its result is not delayed by the cleanup and health
check that follow; the runtime gives the process new work only after `clean`.

Isolation between commands: a fresh __main__ namespace each time, and after
each command its sys.path, sys.argv, environment, cwd, signal handlers and
mask, timers, umask, CPU affinity, hooks, warnings filters, root logger,
atexit handlers, open files (fds beyond the baseline that are not device nodes
or anonymous inodes the driver may own) and the modules it imported are put
back as they were. A module that loaded a native extension from an installed
package stays loaded (such modules cannot be loaded twice into one process).
What cannot be put back ends the process instead: a non-daemon thread left
running, device memory that could not be freed, a failed health check.

This module uses the standard library only, and imports as little as
possible: everything it imports is part of every command's baseline.
"""

from __future__ import annotations

import atexit
import builtins
import gc
import importlib
import importlib.util
import io
import json
import os
import runpy
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from typing import Any, Callable

_THIS_FILE = os.path.abspath(__file__)


# --- the CUDA context -------------------------------------------------------


class Context:
    """The process's CUDA context: created once; freed and checked after each command."""

    kind = "none"

    def check(self) -> None:
        """A small piece of GPU work and a synchronise; raises if the context is unusable."""

    def free_leaks(self) -> str:
        """Free what the last command left on the device; "" or why it could not."""
        return ""


class SimContext(Context):
    """The simulated driver, through krex_runtime.sim.simcuda. Allocations made
    through SimCuda are tracked so that what a command leaks can be freed."""

    kind = "sim"

    def __init__(self) -> None:
        from krex_runtime.sim import simcuda

        self.simcuda = simcuda
        self.cuda = simcuda.SimCuda(0)
        self.live: dict[int, Any] = {}
        live = self.live
        alloc, free = simcuda.SimCuda.alloc, simcuda.SimCuda.free

        def tracked_alloc(cuda: Any, nbytes: int) -> int:
            ptr = alloc(cuda, nbytes)
            live[ptr] = cuda
            return ptr

        def tracked_free(cuda: Any, ptr: int) -> None:
            free(cuda, ptr)
            live.pop(ptr, None)

        simcuda.SimCuda.alloc = tracked_alloc  # type: ignore[method-assign]
        simcuda.SimCuda.free = tracked_free  # type: ignore[method-assign]
        self._free = free

    def check(self) -> None:
        self.cuda.make_current()
        self.cuda.launch(1000)
        self.cuda.synchronize()

    def _used(self) -> int:
        try:
            state = self.simcuda.read_device(os.environ.get(self.simcuda.ENV_DEVICE))
        except (OSError, ValueError):
            return -1
        return sum(sum(s.mem_used) for s in state.slots if s.pid == os.getpid())

    def free_leaks(self) -> str:
        self.cuda.make_current()
        for ptr in list(self.live):
            self._free(self.cuda, ptr)
            del self.live[ptr]
        used = self._used()
        return f"{used} bytes of device memory still allocated" if used > 0 else ""


class DriverContext(Context):
    """A real GPU through the driver API: cuInit, primary context, current."""

    kind = "driver"

    def __init__(self) -> None:
        import ctypes

        self.ct = ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._call("cuInit", 0)
        dev = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(dev), 0)
        self.device = dev.value
        self.ctx = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), self.device)
        self._call("cuCtxSetCurrent", self.ctx)
        self.scratch = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(self.scratch), ctypes.c_size_t(4096))

    def _call(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} failed with CUresult {rc}")

    def check(self) -> None:
        ct = self.ct
        self._call("cuCtxSetCurrent", self.ctx)
        self._call("cuMemsetD8_v2", self.scratch, ct.c_ubyte(7), ct.c_size_t(4096))
        self._call("cuCtxSynchronize")


class TorchContext(Context):
    """torch.cuda's context (the primary one), created by torch.cuda.init()."""

    kind = "torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        torch.cuda.init()
        torch.cuda.set_device(0)
        self.baseline = 0

    def check(self) -> None:
        # A matmul, not just an add: it also creates the cuBLAS handle once, so
        # a command's first matmul does not pay for it.
        t = self.torch.ones(16, 16, device="cuda")
        t = t @ t
        self.torch.cuda.synchronize()
        del t
        self.baseline = self.torch.cuda.memory_allocated()

    def free_leaks(self) -> str:
        gc.collect()
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()
        held = self.torch.cuda.memory_allocated() - self.baseline
        return f"{held} bytes of tensors still referenced" if held > 0 else ""


CONTEXTS: dict[str, Callable[[], Context]] = {
    "sim": SimContext,
    "driver": DriverContext,
    "torch": TorchContext,
    "none": Context,
}


# --- the state a command may change, and how to put it back ----------------------


_UNCATCHABLE = {signal.SIGKILL, signal.SIGSTOP}


class Baseline:
    def __init__(self) -> None:
        self.modules = set(sys.modules)
        self.path = list(sys.path)
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


# --- running one command ------------------------------------------------------------


def _stdio(fd: int, env: dict[str, str], unbuffered: bool, like: Any, is_stderr: bool) -> io.TextIOWrapper:
    """A fresh stream on fd 1 or 2, buffered the way Python's own would be."""
    encoding = env.get("PYTHONIOENCODING", "").partition(":")[0] or getattr(like, "encoding", None) or "utf-8"
    errors = "backslashreplace" if is_stderr else (getattr(like, "errors", None) or "strict")
    raw = io.FileIO(fd, "w", closefd=False)
    buffer: Any = raw if unbuffered else io.BufferedWriter(raw)
    line = is_stderr or (not unbuffered and raw.isatty())
    return io.TextIOWrapper(buffer, encoding=encoding, errors=errors, line_buffering=line, write_through=unbuffered)


def _exit_code(code: Any) -> int:
    """What the interpreter would exit with after `sys.exit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _internal(tb: Any) -> bool:
    name = tb.tb_frame.f_code.co_filename
    return name == _THIS_FILE or "runpy" in os.path.basename(name)


def _report(exc: BaseException) -> None:
    """Print an uncaught exception as the interpreter would: from the command's frames on."""
    tb = exc.__traceback__
    while tb is not None and _internal(tb):
        tb = tb.tb_next
    exc.__traceback__ = tb
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:
        traceback.print_exception(type(exc), exc, tb)


def _run_entry(entry: dict[str, Any], env: dict[str, str]) -> None:
    kind, target, args = entry["kind"], entry["target"], entry["args"]
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if kind == "path":
        script = os.path.abspath(target)
        if not os.path.exists(script):
            print(f"{entry['program']}: can't open file {script!r}: [Errno 2] No such file or directory", file=sys.stderr)
            raise SystemExit(2)
        sys.path[:0] = [os.path.dirname(os.path.realpath(script)), *extra]
        sys.argv[:] = [target, *args]
        runpy.run_path(script, run_name="__main__")  # __file__ absolute, as for `python script.py`
    elif kind == "module":
        sys.path[:0] = [os.getcwd(), *extra]
        sys.argv[:] = [target, *args]
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            print(f"{entry['program']}: No module named {target}", file=sys.stderr)
            raise SystemExit(1)
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif kind == "code":
        sys.path[:0] = ["", *extra]
        sys.argv[:] = ["-c", *args]
        main = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None, "__spec__": None}
        exec(compile(target, "<string>", "exec"), main)
    else:
        sys.path[:0] = [os.getcwd(), *extra]
        sys.argv[:] = [target, *args]
        module_name, _, attr = target.partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        raise SystemExit(obj())


def run_command(msg: dict[str, Any], fds: list[int], worker_pid: int) -> dict[str, Any]:
    """Run one command with fds as its stdout and stderr; the `done` message."""
    entry, env = msg["entry"], msg["env"]
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        os.close(fd)
    outer = sys.stdout, sys.stderr
    unbuffered = entry.get("unbuffered", False) or bool(env.get("PYTHONUNBUFFERED"))
    sys.stdout = _stdio(1, env, unbuffered, outer[0], is_stderr=False)
    sys.stderr = _stdio(2, env, unbuffered, outer[1], is_stderr=True)
    exit_code: int | None = 0
    sig: int | None = None
    state, reason = "finished", ""
    try:
        os.environ.clear()
        os.environ.update(env)
        try:
            os.chdir(msg["cwd"] or "/")
        except OSError as exc:
            state, exit_code, reason = "failed", None, f"cannot start: {exc.strerror}: {msg['cwd']}"
        else:
            try:
                _run_entry(entry, env)
            except SystemExit as exc:
                exit_code = _exit_code(exc.code)
            except KeyboardInterrupt as exc:
                # The interpreter reports an uncaught Ctrl-C by dying of SIGINT.
                _report(exc)
                exit_code, sig, reason = None, signal.SIGINT, "killed by SIGINT"
            except BaseException as exc:
                _report(exc)
                exit_code = 1
            if os.getpid() != worker_pid:
                _flush()
                os._exit(exit_code if exit_code is not None else 128 + (sig or 0))
            atexit._run_exitfuncs()
    finally:
        atexit._clear()
        _flush()
        sys.stdout, sys.stderr = outer
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    return {"type": "done", "state": state, "exit_code": exit_code, "signal": sig, "reason": reason}


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


# --- the serving loop ----------------------------------------------------------------


def _receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    buf = bytearray()
    fds: list[int] = []
    while True:
        data, got, _flags, _addr = socket.recv_fds(sock, 1 << 16, 4)
        fds.extend(got)
        if not data:
            return None, fds
        buf += data
        if buf.endswith(b"\n"):
            return json.loads(buf), fds


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.sendall(json.dumps(msg).encode() + b"\n")


def serve(spec: dict[str, Any]) -> None:
    sock = socket.socket(fileno=spec["control_fd"])
    sock.setblocking(True)
    t0 = time.monotonic()
    try:
        for name in spec["preload"]:
            importlib.import_module(name)
        # Imports run in parallel with other context processes; the context
        # waits for the runtime's go, one creation at a time node-wide.
        _send(sock, {"type": "imported", "import_s": time.monotonic() - t0})
        go, fds = _receive(sock)
        for fd in fds:
            os.close(fd)
        if go is None:
            os._exit(0)
        if go.get("type") != "create":
            raise RuntimeError(f"expected the runtime's create message, got {go.get('type')!r}")
        context = CONTEXTS[spec["context"]]()
        context.check()
    except BaseException as exc:
        traceback.print_exc()
        _send(sock, {"type": "failed", "reason": f"{type(exc).__name__}: {exc}"})
        os._exit(1)
    # Exit handlers of preloaded modules are the context's, not any command's:
    # the process ends with os._exit and never runs them.
    atexit._clear()
    baseline = Baseline()
    _send(sock, {"type": "ready", "startup_s": time.monotonic() - t0, "context": context.kind})
    pid = os.getpid()
    while True:
        msg, fds = _receive(sock)
        if msg is None:
            os._exit(0)
        if msg.get("type") != "run" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            _send(sock, {"type": "done", "state": "failed", "exit_code": None, "signal": None, "reason": "bad run message"})
            continue
        entry = msg["entry"]
        _send(sock, run_command(msg, fds, pid))
        command_dirs = [os.path.realpath(msg["cwd"] or "/")]
        if entry["kind"] == "path":
            command_dirs.append(os.path.dirname(os.path.realpath(os.path.join(msg["cwd"] or "/", entry["target"]))))
        _send(sock, _clean(baseline, context, command_dirs, spec["health_check"]))


def _clean(baseline: Baseline, context: Context, command_dirs: list[str], health_check: bool) -> dict[str, Any]:
    try:
        why = baseline.restore(command_dirs)
        if why:
            return {"type": "clean", "ok": False, "cause": "threads", "reason": why}
        why = context.free_leaks()
        if why:
            return {"type": "clean", "ok": False, "cause": "leak", "reason": why}
        if health_check:
            try:
                context.check()
            except Exception as exc:
                return {"type": "clean", "ok": False, "cause": "health", "reason": f"health check failed: {exc}"}
    except Exception as exc:
        traceback.print_exc()
        return {"type": "clean", "ok": False, "cause": "cleanup", "reason": f"cleanup failed: {exc!r}"}
    return {"type": "clean", "ok": True, "cause": "", "reason": ""}


def main() -> None:
    serve(json.loads(sys.argv[1]))


if __name__ == "__main__":
    main()
