"""The region protocol version has one home, krex_runtime/region_wire.py:
the runtime's channel and the Python client import it, and the C client's
header is generated from it (native/tools/gen_region_protocol.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from krex_native import NATIVE

from krex_runtime import client, region_wire
from krex_runtime.regions import channel

GENERATOR = NATIVE / "tools" / "gen_region_protocol.py"
HEADER = NATIVE / "src" / "intercept" / "region_protocol.h"


def generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GENERATOR), *args], capture_output=True, text=True)


def test_the_c_header_is_generated_from_the_python_constant() -> None:
    done = generate("--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"#define KREX_REGION_PROTOCOL {region_wire.PROTOCOL}\n" in HEADER.read_text()


def test_the_check_fails_when_they_differ(tmp_path: Path) -> None:
    source = tmp_path / "region_protocol.py"
    source.write_text(f"PROTOCOL = {region_wire.PROTOCOL + 1}\n")
    done = generate("--check", "--source", str(source), "--output", str(HEADER))
    assert done.returncode == 1
    assert "out of date" in done.stderr and f"+#define KREX_REGION_PROTOCOL {region_wire.PROTOCOL + 1}" in done.stdout


def test_a_source_without_the_constant_is_an_error(tmp_path: Path) -> None:
    source = tmp_path / "region_protocol.py"
    source.write_text('PROTOCOL = "2"\n')
    done = generate("--check", "--source", str(source), "--output", str(tmp_path / "out.h"))
    assert done.returncode != 0 and "no positive integer to PROTOCOL" in done.stderr


def test_the_runtime_and_the_python_client_share_it() -> None:
    assert channel.PROTOCOL is region_wire.PROTOCOL and client.PROTOCOL is region_wire.PROTOCOL
    assert channel.HELLO_USAGE is region_wire.HELLO_USAGE
    assert region_wire.HELLO_USAGE.startswith(f"HELLO {region_wire.PROTOCOL} ")
    assert region_wire.hello("3", "42", "t") == f"HELLO {region_wire.PROTOCOL} 3 42 t"
