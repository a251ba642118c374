"""The runtime is headless: importing it never pulls in the console's UI stack."""

from __future__ import annotations

import subprocess
import sys

RUNTIME_MODULES = [
    "krex_runtime.main",
    "krex_runtime.cli",
    "krex_runtime.service.runtime",
    "krex_runtime.api",
    "krex_runtime.transport",
]


def test_runtime_imports_no_ui() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in RUNTIME_MODULES)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'krex_console'))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
