"""Where a runtime listens, derived from its run folder.

Clients find the runtime of this node the same way the runtime chose its
sockets: KREX_ENDPOINT, else KREX_RUN_DIR, else the default run folder.
"""

from __future__ import annotations

import os
from pathlib import Path

CONTROL_SOCKET = "control.sock"
CONTROL_READ_ONLY_SOCKET = "control-ro.sock"
TELEMETRY_SOCKET = "telemetry.sock"
RUN_DIR_ENV = "KREX_RUN_DIR"  # the run dir, for every client and a runtime whose config names none
SOCKETS = (CONTROL_SOCKET, CONTROL_READ_ONLY_SOCKET, TELEMETRY_SOCKET)  # what a runtime binds in its run dir


def control(run_dir: Path) -> str:
    return f"ipc://{run_dir / CONTROL_SOCKET}"


def control_read_only(run_dir: Path) -> str:
    return f"ipc://{run_dir / CONTROL_READ_ONLY_SOCKET}"


def telemetry(run_dir: Path) -> str:
    return f"ipc://{run_dir / TELEMETRY_SOCKET}"


def default_run_dir() -> Path:
    """/run/krex for a system service, else a per-user folder."""
    if os.geteuid() == 0:
        return Path("/run/krex")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    return Path(xdg) / "krex" if xdg else Path(f"/tmp/krex-{os.geteuid()}")


def client_run_dir() -> Path:
    env = os.environ.get(RUN_DIR_ENV)
    return Path(env) if env else default_run_dir()


def client_control() -> str:
    return os.environ.get("KREX_ENDPOINT") or control(client_run_dir())


def client_telemetry(control_endpoint: str) -> str:
    """The telemetry endpoint beside a control endpoint (ipc: same folder)."""
    if control_endpoint.startswith("ipc://"):
        folder = Path(control_endpoint[len("ipc://") :]).parent
        return telemetry(folder)
    return os.environ.get("KREX_TELEMETRY", "")
