"""Real accounts for the access tests: groups and unprivileged users made
for a test module (the `accounts` fixture, tests/node/conftest.py), a call
run as one of them, and the mode, owner and group they meet a path with."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime_helpers import run_as


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
    return run_as(account.uid, account.gid, list(account.groups), fn)


def mode_of(path: Path) -> tuple[int, int, int]:
    info = os.stat(path)
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid
