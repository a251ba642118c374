"""krex_runtime/regions/gate/header_layout.py mirrors native/include/krex_gate.h byte for byte."""

from __future__ import annotations

import ctypes
import subprocess

from krex_native import Build

from krex_runtime.regions.gate import header_layout as gate_layout


def c_layout(build: Build) -> dict[str, tuple[int, int]]:
    out = subprocess.run([str(build.tool("gate_layout"))], check=True, capture_output=True, text=True).stdout
    layout = {}
    for line in out.splitlines():
        key, a, b = line.split()
        layout[key] = (int(a), int(b))
    return layout


def test_struct_fields_match_the_header(lib_build: Build) -> None:
    layout = c_layout(lib_build)
    assert layout["sizeof.header"][0] == gate_layout.HEADER_SIZE
    assert layout["sizeof.proc"][0] == gate_layout.PROC_SIZE
    for prefix, fields in (("header", gate_layout.HEADER_FIELDS), ("proc", gate_layout.PROC_FIELDS)):
        c_fields = {k.split(".", 1)[1] for k in layout if k.startswith(prefix + ".")}
        assert c_fields == {name for name, _, _ in fields}, f"{prefix}: field sets differ"
        for name, ctype, offset in fields:
            assert layout[f"{prefix}.{name}"] == (offset, ctypes.sizeof(ctype)), f"{prefix}.{name}"


def test_constants_match_the_header(lib_build: Build) -> None:
    layout = c_layout(lib_build)
    assert layout["const.magic"][0] == gate_layout.MAGIC
    assert layout["const.version"][0] == gate_layout.VERSION
    assert layout["const.max_procs"][0] == gate_layout.MAX_PROCS
    assert layout["const.class_count"][0] == len(gate_layout.CALL_CLASSES)
    assert layout["const.class_slots"][0] == gate_layout.CLASS_SLOTS
    assert layout["const.class_perturbing"][0] == gate_layout.PERTURBING_MASK
    assert layout["const.closed"][0] == gate_layout.CLOSED
    assert layout["const.no_holder"][0] == gate_layout.NO_HOLDER
    assert layout["const.default_stale_ns"][0] == gate_layout.DEFAULT_STALE_NS
    assert layout["const.default_drain_timeout_ns"][0] == gate_layout.DEFAULT_DRAIN_TIMEOUT_NS
