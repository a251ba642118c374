"""Checks of single settings against the machine and the kernel: folders the
kernel keeps no files in, cores the runtime may not run on, labels that would
forge lines, a uid range under root's group, listen addresses, entry points
and environments no process could start with. Each says why in one line, or
None when the setting can be used.
"""

from __future__ import annotations

import os
import pwd

from krex_runtime.node.config.sections import Config
from krex_runtime.tenant.auto_region import parse_entry

# The kernel's own file systems: what is written there is not kept as files
# (a command's output in /proc is lost); /dev/shm is a tmpfs like any other.
KERNEL_TREES = ("/proc", "/sys", "/dev")
KEPT_UNDER_DEV = "/dev/shm"


def kernel_path_problems(config: Config) -> list[str | None]:
    """Why a folder the runtime keeps files in cannot be where it is set (None: it can)."""
    folders = (("runtime.run_dir", config.runtime.run_dir), ("runtime.lock_dir", config.runtime.lock_dir),
               ("tenants.output_dir", config.tenants.output_dir), ("eval.build_dir", config.eval.build_dir))
    return [_kernel_path_problem(key, value) for key, value in folders if value]


def _kernel_path_problem(key: str, value: str) -> str | None:
    real = os.path.realpath(value)  # where it leads: a symbolic link on the way counts as its target
    if real == KEPT_UNDER_DEV or real.startswith(KEPT_UNDER_DEV + "/"):
        return None
    for tree in KERNEL_TREES:
        if real == tree or real.startswith(tree + "/"):
            shown = f"{value!r}" + (f" (that is {real!r})" if real != value else "")
            return (f"{key} = {shown} is in {tree}, a file system of the kernel's that keeps no files of ours "
                    f"(/proc, /sys and /dev are refused, /dev/shm aside)")
    return None


def cpu_slices_problem(slices: dict[str, list[int]], usable: set[int] | None = None) -> str | None:
    """Why `regions.cpu_slices` cannot be used on this machine (None: it can):
    a core that is not one the runtime may run on (os.sched_getaffinity),
    which could neither take the GPU's tenants nor its region holder."""
    cores = usable if usable is not None else set(os.sched_getaffinity(0))
    for gpu, listed in slices.items():
        missing = sorted(set(listed) - cores)
        if missing:
            return (f"regions.cpu_slices.{gpu} names core {missing[0]}, not one of this machine's cores the runtime "
                    f"may use ({_core_ranges(cores)})")
    return None


def _core_ranges(cores: set[int]) -> str:
    """{0, 1, 2, 5} -> "0-2, 5"."""
    ranges: list[list[int]] = []
    for core in sorted(cores):
        if ranges and core == ranges[-1][1] + 1:
            ranges[-1][1] = core
        else:
            ranges.append([core, core])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def labels_problem(config: Config) -> str | None:
    """Labels are shown one per line (`krex status`, the console, logs): a
    newline or any other control character in one would forge lines."""
    for name, value in config.runtime.labels.items():
        if not (name.isprintable() and value.isprintable()):
            return (f"runtime.labels.{name!r}: names and values may hold only printable characters "
                    f"(no newline or other control character)")
    return None


def root_range_problem(config: Config) -> str | None:
    """With a uid range, tenants.user gives the tenants its group and home:
    root's would make every tenant a member of root's group."""
    t = config.tenants
    if not t.uid_range or not t.user or t.allow_root or not _is_root(t.user):
        return None
    return (f"tenants.user = {t.user!r} with tenants.uid_range would put every tenant in root's group: name an "
            f"unprivileged account or only tenants.group, or set tenants.allow_root = true")


def _is_root(user: str) -> bool:
    if user == "root":
        return True
    try:
        return pwd.getpwnam(user).pw_uid == 0
    except KeyError:
        return False  # an unknown user is refused at start, by name


def listen_address(text: str) -> tuple[str, int] | None:
    """(host, port) of "HOST:PORT" or "[IPV6]:PORT", or None when it is not one."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        return None
    return host, int(port)


def auto_region_entry_problem(entries: tuple[str, ...] | list[str]) -> str | None:
    """Why one of `entries` cannot name an entry point (None: all can)."""
    for text in entries:
        try:
            parse_entry(text)
        except ValueError as exc:
            return str(exc)
    return None


def environment_problem(env: dict[str, str]) -> str | None:
    """Why no process can be started with `env` (None: it can): the kernel
    takes it as C strings `NAME=value`."""
    for name, value in env.items():
        if not name or "=" in name:
            return f"environment name {name[:60]!r} is empty or holds '='"
        if "\0" in name or "\0" in value:
            return f"environment variable {name[:60]!r} holds a NUL character"
    return None
