"""Forwarded mode's one-shape operations: the client's entry points and the
server's execution of them are generated from one op table
(native/tools/forward_ops.py), and the files in the tree are up to date."""

from __future__ import annotations

import subprocess
import sys

from krex_native import NATIVE


def test_generated_forward_ops_are_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, str(NATIVE / "tools" / "gen_forward_ops.py"), "--check"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr


def test_every_generated_server_operation_is_dispatched_and_sent() -> None:
    """Each operation the server executes from the table has its dispatch
    entry, and some client entry point sends it."""
    server = (NATIVE / "src" / "forward" / "server_ops_gen.inc").read_text()
    client = (NATIVE / "src" / "forward" / "client_ops_gen.c").read_text()
    sys.path.insert(0, str(NATIVE / "tools"))
    try:
        from forward_ops import OPS
    finally:
        sys.path.pop(0)
    for op in OPS:
        if op.server:
            assert f"[KREX_FWD_OP_{op.name}] = exec_{op.name}," in server, op.name
        assert f"fwd_call(KREX_FWD_OP_{op.name}, " in client, op.name
