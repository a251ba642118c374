"""Whether a process may still fork children that use CUDA: the zygote's check.

A forked child gets a copy of its parent's memory but only the thread that
called fork. A parent that started threads (a thread pool, a watchdog, the
driver's own helpers) may have forked while one of them held a lock (malloc's,
a logging lock, the driver's): the child inherits the lock taken and never
released, and hangs at its first use. A parent that initialised the CUDA
driver hands its children a driver state they cannot use (CUDA is not
fork-safe: a child gets `CUDA_ERROR_NOT_INITIALIZED` or worse). So the zygote
imports its modules one at a time and checks after each that the process is
still single-threaded and that the driver, if loaded, is not initialised;
the first module that breaks either is named in the refusal. Native threads
that a library stops for a fork by itself (OpenBLAS's pool) do not count: a
probe fork tells them apart from threads that would still run.

Standard library only, like all tenant-side code.
"""

from __future__ import annotations

import ctypes
import os
import threading

CUDA_ERROR_NOT_INITIALIZED = 3
RTLD_NOLOAD = getattr(os, "RTLD_NOLOAD", 4)


class UnsafePreload(RuntimeError):
    """A preloaded module left the process unsafe to fork; the message says which and why."""


def os_threads() -> list[str]:
    """The names of every thread of this process, as the kernel lists them
    (Python's and native ones alike: a C library's thread pool counts too)."""
    names = []
    try:
        tids = sorted(os.listdir("/proc/self/task"), key=int)
    except OSError:
        return [t.name for t in threading.enumerate()]
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8", errors="replace") as f:
                names.append(f.read().strip())
        except OSError:
            continue  # it ended meanwhile
    return names


def loaded_drivers() -> list[str]:
    """Paths of the CUDA driver libraries mapped into this process (the real
    libcuda or the simulator, which takes its name)."""
    found: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
                if os.path.basename(path).startswith("libcuda.so") and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def driver_initialised() -> str:
    """The path of a loaded CUDA driver that was initialised (cuInit) in this
    process, or "". Asking does not initialise it: without cuInit,
    cuDeviceGetCount answers CUDA_ERROR_NOT_INITIALIZED, and a library that is
    not loaded is not loaded by asking (RTLD_NOLOAD)."""
    for path in loaded_drivers():
        try:
            lib = ctypes.CDLL(path, mode=RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        count = ctypes.c_int(0)
        try:
            rc = lib.cuDeviceGetCount(ctypes.byref(count))
        except AttributeError:
            continue
        if rc != CUDA_ERROR_NOT_INITIALIZED:
            return path
    return ""


def _probe_fork() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def problem(module: str) -> str:
    """Why the process is no longer safe to fork after importing `module` ("" if it is)."""
    driver = driver_initialised()
    if driver:
        return (
            f"importing {module!r} initialised the CUDA driver ({driver}); a forked child cannot use a driver "
            "its parent initialised, so preload it in pooled mode instead, or import it in the command"
        )
    threads = os_threads()
    if len(threads) > 1 and threading.active_count() == 1:
        # Native threads may belong to a library that stops them for a fork
        # itself (OpenBLAS, which NumPy loads, joins its pool in a
        # pthread_atfork handler and starts it again when next used): fork
        # once to find out, and count what is left.
        _probe_fork()
        threads = os_threads()
    if len(threads) > 1 or threading.active_count() > 1:
        python = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        native = threads[1:]
        described = ", ".join(python) if python else ", ".join(native) or "unnamed"
        return (
            f"importing {module!r} started {max(len(native), len(python))} thread(s) ({described}); a zygote must "
            "stay single-threaded, or a forked child can inherit a lock one of them held and hang"
        )
    return ""


def check(module: str) -> None:
    why = problem(module)
    if why:
        raise UnsafePreload(why)
