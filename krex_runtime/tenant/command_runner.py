"""Running one pooled command inside the context process, as `python` would.

The command's stdout and stderr become fds 1 and 2 with fresh streams, its
entry (a script, a module, `-c` code or a `module:function`) runs in a fresh
__main__ namespace, and its exit code, uncaught exception and exit handlers
behave as in a process of its own: tracebacks start at the command's frames,
never at the worker's.
"""

from __future__ import annotations

import atexit
import builtins
import ctypes
import importlib
import importlib.util
import io
import os
import runpy
import signal
import sys
import threading
import traceback
from typing import Any

from krex_runtime.tenant import auto_region

# The worker's own modules: their frames belong to the process, not to the
# command, and are cut from the tracebacks a command prints.
_HERE = os.path.dirname(os.path.abspath(__file__))
WORKER_FILES = frozenset(
    os.path.join(_HERE, f"{name}.py") for name in (
        "context_worker", "command_runner", "cuda_context", "isolation", "process_state", "framework_state", "zygote",
        "forked_child",
    )
)


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
    return os.path.abspath(name) in WORKER_FILES or "runpy" in os.path.basename(name)


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


def run_command(msg: dict[str, Any], fds: list[int], worker_pid: int, join_threads: bool = False) -> dict[str, Any]:
    """Run one command with fds as its stdout and stderr; the `done` message.
    `join_threads`: wait for its non-daemon threads before its exit handlers,
    as the interpreter does at exit (a forked child, which then exits, so
    its fds 1 and 2 are not kept to be put back either: the command sees only
    its own descriptors; a context process instead retires when a command
    leaves a thread running)."""
    entry, env = msg["entry"], msg["env"]
    sys.stdout.flush()
    sys.stderr.flush()
    saved = None if join_threads else (os.dup(1), os.dup(2))
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
    undo_auto_regions = None
    try:
        os.environ.clear()
        os.environ.update(env)
        # The process started before this command: its start-up hook never saw
        # the command's auto-regions, so they are set up (and put back) here.
        undo_auto_regions = auto_region.activate(env)
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
            if join_threads:
                threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
    finally:
        if undo_auto_regions is not None:
            undo_auto_regions()
        atexit._clear()
        _flush()
        sys.stdout, sys.stderr = outer
        if saved is not None:
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
    # What C code wrote through stdio (printf, std::cout) and still buffers
    # belongs to this command's output, not to the next command's or the log.
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass
