"""Whether this user may use an ipc endpoint at all, checked before connecting:
a socket file closed to its user fails here with the reason, rather than as a
runtime that never answers (ZeroMQ retries such a connect silently)."""

from __future__ import annotations

import grp
import os
from pathlib import Path

from krex_runtime.transport.errors import RuntimeUnavailable


def check_reachable(endpoint: str) -> None:
    """Raise RuntimeUnavailable, with why, for an ipc endpoint that is missing
    or closed to this user; tcp endpoints are not checked here."""
    if not endpoint.startswith("ipc://"):
        return
    path = Path(endpoint[len("ipc://") :])
    try:
        gid = path.stat().st_gid
    except FileNotFoundError:
        raise RuntimeUnavailable(f"no krex runtime at {endpoint}") from None
    except PermissionError:
        raise RuntimeUnavailable(f"permission denied on {endpoint}: its folder is closed to you") from None
    if not os.access(path, os.R_OK | os.W_OK):
        try:
            group = f" (group {grp.getgrgid(gid).gr_name})"
        except KeyError:
            group = ""
        raise RuntimeUnavailable(f"permission denied on {endpoint}: only its owner and group{group} may use it")
