"""A runtime started only to be refused: the hostile tests of what a start
must refuse read its one line of stderr."""

from __future__ import annotations

import subprocess

from krex_runtime.testing.local_runtime import Runtime, command


def start_refused(rt: Runtime, *args: str) -> str:
    """Starts `rt` (its config written) with `args`, expecting the refusal:
    exit status 125 and one line on stderr, no traceback. Returns the line."""
    rt.root.mkdir(parents=True, exist_ok=True)
    rt.write_config()
    done = subprocess.run([*command("krex-runtime"), "--config", str(rt.config_path), "--sim", str(rt.sim), *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 125, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one line, no traceback
    return lines[0]
