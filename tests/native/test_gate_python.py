"""The runtime's gate API on its own (no tenants): creation, closing, reopening."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from krex_runtime.regions.gate import core as gate
from krex_runtime.regions.gate import header_layout as gate_layout


def test_create_and_attach_agree(tmp_path: Path) -> None:
    path = tmp_path / "gpu0.gate"
    with gate.Gate.create(path, max_procs=8, stale_after_s=1.5, drain_timeout_s=2.0) as g:
        assert path.stat().st_size == gate_layout.HEADER_SIZE
        assert g.add_tenant(3).stat().st_size == gate_layout.entries_size(8)
        assert not g.is_closed and g.holder == gate_layout.NO_HOLDER
        with gate.Gate.attach(path) as other:
            assert other.max_procs == 8
            assert other._hget("stale_after_ns") == 1_500_000_000
            assert other._hget("drain_timeout_ns") == 2_000_000_000
            assert other._hget("runtime_pid") == os.getpid()
            assert other.processes() == [] and other.tenants == [3]
        g.remove_tenant(3)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu0.gate"]


def test_close_and_open_move_the_gate_word(tmp_path: Path) -> None:
    with gate.Gate.create(tmp_path / "g") as g:
        w0, gen0 = g.gate_word, g.generation
        assert g.close_gate(7) == gen0 + 1
        assert g.is_closed and g.holder == 7
        w1 = g.gate_word
        assert w1 != w0 and w1 & gate_layout.CLOSED
        g.open_gate()
        assert not g.is_closed and g.holder == gate_layout.NO_HOLDER
        assert g.gate_word not in (w0, w1)  # a parked thread's FUTEX_WAIT(w1) returns
        with pytest.raises(ValueError):
            g.close_gate(gate_layout.NO_HOLDER)


def test_heartbeat_is_monotonic_ns(tmp_path: Path) -> None:
    with gate.Gate.create(tmp_path / "g") as g:
        before = time.monotonic_ns()
        g.stamp_heartbeat()
        assert before <= g.heartbeat_ns <= time.monotonic_ns()


def test_attach_refuses_foreign_files(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"\0" * gate_layout.HEADER_SIZE)
    with pytest.raises(gate.GateError, match="bad magic"):
        gate.Gate.attach(junk)
    with pytest.raises(gate.GateError):
        gate.Gate.attach(tmp_path / "missing")


def test_drain_with_no_tenants_is_immediate(tmp_path: Path) -> None:
    with gate.Gate.create(tmp_path / "g") as g:
        g.close_gate(1)
        assert g.wait_quiescent(1, 0.1) == []
        assert g.drain(1, 0.1) == []
        g.open_gate()


def test_an_entry_reads_back_every_field_as_written(tmp_path: Path) -> None:
    # Gate.entry reads an entry in one struct read; each field written through its own view.
    with gate.Gate.create(tmp_path / "g", max_procs=4) as g:
        g.add_tenant(7)
        for n, (name, _ctype, _) in enumerate(gate_layout.PROC_FIELDS):
            view = g._pget(7, 2, name)
            if isinstance(view, (int, float)) or not hasattr(view, "value"):
                for i in range(len(view)):
                    view[i] = 100 * n + i
            else:
                view.value = 100 * n + 1
        e = g.entry(7, 2)
        for n, (name, _, _) in enumerate(gate_layout.PROC_FIELDS):
            if name == "tenant_id":
                assert e.tenant_id == 7  # from the file the entry is in, not from what it says
            elif name == "calls":
                assert e.calls == {c: 100 * n + i for i, c in enumerate(gate_layout.CALL_CLASSES)}
            elif name == "in_class":
                assert e.in_class == {c: 100 * n + i for i, c in enumerate(gate_layout.CALL_CLASSES)}
            elif name in ("uses_cuda", "fail_open"):
                assert getattr(e, name) is True
            else:
                assert getattr(e, name) == 100 * n + 1, name
