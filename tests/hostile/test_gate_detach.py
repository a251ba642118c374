"""Shutdown can never crash on the gate mapping: a gate detached while a view
of it is still exported (an entry still reading in its worker thread, a view
kept by a traceback) detaches without raising and unmaps once the last view
goes."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest

from krex_runtime.regions.gate import Gate, GateError


def _maps(path: Path) -> bool:
    return str(path) in Path(f"/proc/{os.getpid()}/maps").read_text()


def test_a_gate_with_a_view_still_exported_detaches_without_raising(tmp_path: Path) -> None:
    gate = Gate.create(tmp_path / "gpu0.gate")
    view = ctypes.c_uint32.from_buffer(gate._header._mm, 0)  # what a reader in mid-read holds
    gate.detach()  # mmap.close() alone raises BufferError here
    _ = view.value  # the memory under a live view stays mapped: no fault
    assert _maps(gate.path)
    with pytest.raises(GateError):
        _ = gate.heartbeat_ns
    del view
    assert not _maps(gate.path)
    gate.detach()  # twice is fine


def test_detach_while_another_thread_reads_the_gate(tmp_path: Path) -> None:
    for i in range(15):
        gate = Gate.create(tmp_path / f"gpu{i}.gate")
        stop = threading.Event()

        def read(gate: Gate = gate, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                try:
                    gate.processes()
                    _ = gate.heartbeat_ns
                except GateError:
                    return

        reader = threading.Thread(target=read)
        reader.start()
        gate.detach()
        stop.set()
        reader.join()
        with pytest.raises(GateError):
            _ = gate.holder
