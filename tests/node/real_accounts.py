"""Real accounts for the access tests: groups and unprivileged users made
for a test module (the `accounts` fixture, tests/node/conftest.py), a call
run as one of them, and the mode, owner and group they meet a path with."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]


@dataclass(frozen=True)
class Accounts:
    operators: str  # group
    watchers: str  # group
    operator: Account  # in `operators`
    watcher: Account  # in `watchers`
    stranger: Account  # in neither
    tenant: Account  # in neither: the user commands run as


def as_user(account: Account, fn: Callable[[], Any]) -> Any:
    """Run `fn` in a forked child that has dropped to `account`; its JSON-able result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.setgroups(list(account.groups))
            os.setgid(account.gid)
            os.setuid(account.uid)
            result = {"value": fn()}
        except BaseException as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    result = json.loads(data)
    if "error" in result:
        raise AssertionError(f"as {account.name}: {result['error']}")
    return result["value"]


def mode_of(path: Path) -> tuple[int, int, int]:
    info = os.stat(path)
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid
