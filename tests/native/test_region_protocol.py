"""The region protocol version has one home, krex_runtime/tenant/region_protocol.py:
the runtime's channel and the Python client import it, and the C client's
header is generated from it (native/tools/gen_region_protocol.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from krex_native import NATIVE

from krex_runtime.regions import channel
from krex_runtime.tenant import region, region_protocol

GENERATOR = NATIVE / "tools" / "gen_region_protocol.py"
HEADER = NATIVE / "src" / "intercept" / "region_protocol.h"


def generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GENERATOR), *args], capture_output=True, text=True)


def test_the_c_header_is_generated_from_the_python_constant() -> None:
    done = generate("--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"#define KREX_REGION_PROTOCOL {region_protocol.PROTOCOL}\n" in HEADER.read_text()


def test_the_check_fails_when_they_differ(tmp_path: Path) -> None:
    source = tmp_path / "region_protocol.py"
    source.write_text(f"PROTOCOL = {region_protocol.PROTOCOL + 1}\n")
    done = generate("--check", "--source", str(source), "--output", str(HEADER))
    assert done.returncode == 1
    assert "out of date" in done.stderr and f"+#define KREX_REGION_PROTOCOL {region_protocol.PROTOCOL + 1}" in done.stdout


def test_a_source_without_the_constant_is_an_error(tmp_path: Path) -> None:
    source = tmp_path / "region_protocol.py"
    source.write_text('PROTOCOL = "2"\n')
    done = generate("--check", "--source", str(source), "--output", str(tmp_path / "out.h"))
    assert done.returncode != 0 and "no positive integer to PROTOCOL" in done.stderr


def test_the_runtime_and_the_python_client_share_it() -> None:
    assert channel.PROTOCOL is region_protocol.PROTOCOL and region.PROTOCOL is region_protocol.PROTOCOL
    assert channel.HELLO_USAGE.startswith(f"HELLO {region_protocol.PROTOCOL} ")
