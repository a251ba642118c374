"""Where a configured runtime keeps its run folder, its locks and its
simulated device when the config leaves them to the defaults.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from krex_runtime.node.config.sections import Config
from krex_runtime.wire.protocol.endpoints import client_run_dir, default_run_dir


def resolve_run_dir(config: Config) -> Path:
    """runtime.run_dir, else where every client looks (KREX_RUN_DIR, else the
    system default): `--run-dir` has been folded into the config by then."""
    return Path(config.runtime.run_dir) if config.runtime.run_dir else client_run_dir()


def resolve_simulated_device(config: Config) -> str:
    """gpus.simulated_device, else a name of the run dir's own ("default" for
    the system's default run dir): a run dir serves one runtime at a time, so
    two runtimes with run dirs of their own never meet on one simulated device."""
    if config.gpus.simulated_device:
        return config.gpus.simulated_device
    run_dir = resolve_run_dir(config)
    if run_dir == default_run_dir():
        return "default"
    return "rd" + hashlib.sha256(str(run_dir.absolute()).encode()).hexdigest()[:12]


def resolve_lock_dir(config: Config) -> Path:
    """Locks are node-wide: two runtimes with different run folders still collide here."""
    if config.runtime.lock_dir:
        return Path(config.runtime.lock_dir)
    return Path("/run/lock/krex") if os.geteuid() == 0 else Path(f"/tmp/krex-locks-{os.geteuid()}")
