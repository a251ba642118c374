"""Fixtures of the access tests: real accounts, and a folder they may pass through."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_accounts import Account, Accounts
from runtime_helpers import open_folder


@pytest.fixture(scope="module")
def accounts() -> Iterator[Accounts]:
    """Groups and unprivileged users made for this module and removed after it."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("groupadd"):
        pytest.skip("needs root, useradd and groupadd to make real accounts")
    tag = f"krxt{os.getpid()}"
    groups = {"operators": f"{tag}ops", "watchers": f"{tag}ro"}
    users = {"operator": "operators", "watcher": "watchers", "stranger": "", "tenant": ""}
    made_groups: list[str] = []
    made_users: list[str] = []
    try:
        for name in groups.values():
            subprocess.run(["groupadd", "--system", name], check=True, capture_output=True)
            made_groups.append(name)
        found: dict[str, Account] = {}
        for role, group in users.items():
            name = f"{tag}{role[:2]}"
            extra = ["-G", groups[group]] if group else []
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                 *extra, name],
                check=True, capture_output=True,
            )
            made_users.append(name)
            entry = pwd.getpwnam(name)
            found[role] = Account(name, entry.pw_uid, entry.pw_gid, tuple(os.getgrouplist(name, entry.pw_gid)))
        yield Accounts(groups["operators"], groups["watchers"], **found)
    finally:
        for name in made_users:
            subprocess.run(["userdel", name], capture_output=True)
        for name in made_groups:
            subprocess.run(["groupdel", name], capture_output=True)


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A folder every user may pass through (the test's own tmp_path is root's alone)."""
    yield from open_folder("krex-access-")
