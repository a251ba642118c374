"""The console is a thin client: it reaches the runtime through its protocol,
state, trace and client modules only, never through the service's internals."""

from __future__ import annotations

import subprocess
import sys

ALLOWED = {
    "krex_runtime", "krex_runtime.protocol", "krex_runtime.typed", "krex_runtime.state", "krex_runtime.trace",
    "krex_runtime.control_client", "krex_runtime.endpoints", "krex_runtime.config",
}


def test_console_imports_only_the_runtime_protocol() -> None:
    code = (
        "import sys, krex_console.app\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'krex_runtime')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = set(filter(None, done.stdout.strip().split(",")))
    assert imported <= ALLOWED, f"the console imports runtime internals: {sorted(imported - ALLOWED)}"
