"""One transport: the product opens a client's socket to a runtime (a
control DEALER, a telemetry SUB, a REQ) only in krex_runtime/transport/.

Servers keep their own sockets (the runtime's ROUTER and PUB, the cluster
gateway's); what this finds is any call that names a client kind, so a new
client written beside the transport fails here with its file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("krex_runtime", "krex_console", "krex_cluster", "krex_bench")
CLIENT_KINDS = frozenset({"DEALER", "SUB", "XSUB", "REQ"})
TRANSPORT = REPO / "krex_runtime" / "transport"


def _client_kind(node: ast.expr, imported: set[str]) -> str | None:
    """The client socket kind an argument names: zmq.DEALER, or DEALER imported from zmq."""
    on_zmq = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "zmq"
    if on_zmq and isinstance(node, ast.Attribute) and node.attr in CLIENT_KINDS:
        return node.attr
    if isinstance(node, ast.Name) and node.id in imported:
        return node.id
    return None


def client_sockets(path: Path, root: Path = REPO) -> list[str]:
    """`file:line KIND` for each call in `path` given a client socket kind."""
    tree = ast.parse(path.read_text(), filename=str(path))
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "zmq"
        for alias in node.names
        if alias.name in CLIENT_KINDS
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            kind = _client_kind(arg, imported)
            if kind is not None:
                found.append(f"{path.relative_to(root)}:{node.lineno} {kind}")
    return found


def product_files() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (REPO / package).rglob("*.py"))


def test_only_the_transport_opens_client_sockets() -> None:
    outside = [
        where for path in product_files() if TRANSPORT not in path.parents for where in client_sockets(path)
    ]
    assert outside == [], "client sockets opened outside krex_runtime/transport/: " + ", ".join(outside)


def test_the_transport_opens_the_control_and_telemetry_sockets() -> None:
    """The scan sees what it looks for: the transport's own DEALER and SUB."""
    kinds = {where.rsplit(" ", 1)[1] for path in sorted(TRANSPORT.glob("*.py")) for where in client_sockets(path)}
    assert {"DEALER", "SUB"} <= kinds


def test_the_scan_finds_a_client_written_anywhere(tmp_path: Path) -> None:
    module = tmp_path / "feed.py"
    module.write_text("import zmq\nfrom zmq import REQ\nzmq.Context().socket(zmq.DEALER)\nzmq.Context().socket(REQ)\n"
                      "zmq.Context().socket(zmq.ROUTER)\n")
    assert client_sockets(module, tmp_path) == ["feed.py:3 DEALER", "feed.py:4 REQ"]
