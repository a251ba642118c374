"""A command's own Python finds KREX's region client (tenant/python_path.py):
one without the project installed enters a region and is granted it; one
with the project installed keeps its own package whole, `__init__` included."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from krex_runtime.tenant import python_path

SCRIPT = """\
import json, sys
from krex_runtime.client import region, under_runtime
from krex_runtime.tenant import region as client
with region():
    granted = client._channel.region_seq  # the runtime's number of the region it granted
print(json.dumps({"under_runtime": under_runtime(), "granted": granted, "client": client.__file__}))
"""
OWN_PACKAGE_SCRIPT = SCRIPT.replace("print(json.dumps({", "from krex_runtime import Client\nprint(json.dumps({'own': Client.where, ")


def python_without_krex() -> str | None:
    """A Python 3.11+ of this machine that cannot import krex_runtime by itself."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3")):
        if not candidate or not Path(candidate).exists() or Path(candidate).resolve() == Path(sys.executable).resolve():
            continue
        probe = subprocess.run([candidate, "-I", "-c", "import sys; assert sys.version_info >= (3, 11); import krex_runtime"],
                               capture_output=True, cwd="/", timeout=30)
        if probe.returncode != 0 and b"No module named 'krex_runtime'" in probe.stderr:
            return candidate
    return None


def run_json(rt: Any, *argv: str) -> dict[str, Any]:
    done = rt.krex("run", "--", *argv)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_any_python_a_command_runs_imports_the_region_client(make_runtime: Any, tmp_path: Path) -> None:
    system_python = python_without_krex()
    if system_python is None:
        pytest.skip("no Python >= 3.11 without KREX installed on this machine")
    rt = make_runtime(policy="krex", sim=1)
    script = tmp_path / "bench.py"
    script.write_text(SCRIPT)

    # 1. A Python without the project: the runtime's client, and the region is granted.
    seen = run_json(rt, system_python, str(script))
    assert seen["under_runtime"] and seen["granted"], seen
    with rt.client() as client:
        assert client.call("snapshot")["state"]["gpus"][0]["regions_granted"] == 1
    assert Path(seen["client"]).resolve().parent.parent == python_path.RUNTIME_PACKAGE

    # 2. A Python whose own krex_runtime package is installed (a venv with one
    # in site-packages): its modules and its __init__ (a lazy __getattr__)
    # stay what they are; the region client comes from wherever it is.
    venv = tmp_path / "venv"
    subprocess.run([system_python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    own = site / "krex_runtime"
    own.mkdir()
    (own / "__init__.py").write_text(textwrap.dedent("""\
        def __getattr__(name):
            if name == "Client":
                from krex_runtime.api import Client
                return Client
            raise AttributeError(name)
    """))
    (own / "api.py").write_text("class Client:\n    where = 'installed'\n")
    check = tmp_path / "own.py"
    check.write_text(OWN_PACKAGE_SCRIPT)
    seen = run_json(rt, str(venv / "bin" / "python"), str(check))
    assert seen["own"] == "installed" and seen["granted"], seen

    # 3. The runtime's own Python (the project installed): every part still imports.
    seen = run_json(rt, sys.executable, "-c",
                    "import json, krex_runtime, krex_runtime.wire.protocol.envelope, krex_runtime.client as c; "
                    "print(json.dumps({'doc': bool(krex_runtime.__doc__), 'init': krex_runtime.__file__}))")
    assert seen["doc"] and seen["init"].endswith("krex_runtime/__init__.py"), seen
