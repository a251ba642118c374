"""AMD GPUs of a node, discovered through AMD SMI.

The `amdsmi` Python package (AMD's bindings of libamd_smi, installed with
ROCm or `pip install amdsmi` matching the ROCm release) when it imports,
else the `amd-smi` command's JSON, else a clear error, as NVML's discovery
does. Per GPU: its index, UUID, name, memory, the cores of its NUMA node
(the CPU affinity a region pins to), and for the clock witness its top
clock where AMD SMI gives it.

Never run on an AMD GPU: written against AMD SMI's documented API and output
(docs/deployment.md, "AMD nodes" says what is simulator-proven).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

from krex_runtime.node.vendor_library import library_open

HINT = "`krex-runtime --sim 2` (or gpus.simulated_amd) serves simulated GPUs instead"


class AmdDiscoveryError(Exception):
    """No AMD GPU can be served; the message says why and what to do."""


def amd_gpu_records() -> list[dict[str, Any]]:
    """One record per AMD GPU: index, uuid, name, memory_total, cpus, max_sclk_mhz."""
    try:
        import amdsmi
    except ImportError:
        amdsmi = None
    except OSError as exc:  # the bindings import, but libamd_smi.so is missing
        raise AmdDiscoveryError(f"the amdsmi package cannot load libamd_smi ({exc}): is ROCm installed? {HINT}") from None
    if amdsmi is not None:
        return _from_amdsmi(amdsmi)
    if shutil.which("amd-smi") is not None:
        return _from_cli()
    raise AmdDiscoveryError(f"AMD SMI is not available: neither the amdsmi package nor the amd-smi command; {HINT}")


def _from_amdsmi(amdsmi: Any) -> list[dict[str, Any]]:
    with library_open(amdsmi.amdsmi_init, amdsmi.amdsmi_shut_down, amdsmi.AmdSmiException, AmdDiscoveryError,
                      "AMD SMI", "amdgpu", HINT):
        handles = amdsmi.amdsmi_get_processor_handles()
        if not handles:
            raise AmdDiscoveryError(f"AMD SMI found no GPU on this machine; {HINT}")
        out = []
        for i, h in enumerate(handles):
            asic = _query(amdsmi, amdsmi.amdsmi_get_gpu_asic_info, h) or {}
            vram = _query(amdsmi, amdsmi.amdsmi_get_gpu_vram_info, h) or {}
            clock = _query(amdsmi, amdsmi.amdsmi_get_clock_info, h, amdsmi.AmdSmiClkType.GFX) or {}
            numa = _query(amdsmi, amdsmi.amdsmi_topo_get_numa_node_number, h)
            out.append({
                "index": i,
                "uuid": str(_query(amdsmi, amdsmi.amdsmi_get_gpu_device_uuid, h) or f"GPU-AMD-{i}"),
                "name": str(asic.get("market_name") or "AMD GPU"),
                "memory_total": int(vram.get("vram_size", 0)) << 20,  # MB
                "cpus": _numa_cpus(numa),
                "max_sclk_mhz": clock.get("max_clk"),
            })
        return out


def _query(amdsmi: Any, fn: Any, *args: Any) -> Any:
    """Missing data is a value: a query AMD SMI cannot answer is None."""
    try:
        return fn(*args)
    except amdsmi.AmdSmiException:
        return None


def _from_cli() -> list[dict[str, Any]]:
    try:
        done = subprocess.run(["amd-smi", "static", "--json"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise AmdDiscoveryError(f"amd-smi cannot run ({exc}); {HINT}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise AmdDiscoveryError(f"amd-smi failed: {last[:300]}; {HINT}")
    return parse_amd_smi_static(done.stdout)


def parse_amd_smi_static(text: str) -> list[dict[str, Any]]:
    """`amd-smi static --json`: a list of GPUs (or {"gpu_data": [...]} in newer releases)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AmdDiscoveryError(f"amd-smi printed no JSON ({exc.msg}); {HINT}") from None
    gpus = data.get("gpu_data", []) if isinstance(data, dict) else data
    if not isinstance(gpus, list) or not gpus:
        raise AmdDiscoveryError(f"amd-smi found no GPU on this machine; {HINT}")
    out = []
    for i, g in enumerate(gpus):
        asic, vram, numa = g.get("asic", {}), g.get("vram", {}), g.get("numa", {})
        size = vram.get("size", {})
        mb = size.get("value") if isinstance(size, dict) else size
        out.append({
            "index": int(g.get("gpu", i)),
            "uuid": str(g.get("uuid") or (f"GPU-{asic['asic_serial']}" if asic.get("asic_serial") else f"GPU-AMD-{i}")),
            "name": str(asic.get("market_name") or "AMD GPU"),
            "memory_total": int(mb or 0) << 20,
            "cpus": _numa_cpus(numa.get("node") if isinstance(numa, dict) else None),
            "max_sclk_mhz": None,
        })
    return out


def _numa_cpus(node: Any) -> tuple[int, ...]:
    """The cores of the GPU's NUMA node we may use; every core we may use when it cannot say."""
    allowed = os.sched_getaffinity(0)
    try:
        with open(f"/sys/devices/system/node/node{int(node)}/cpulist", encoding="ascii") as f:
            listed = f.read().strip()
    except (OSError, TypeError, ValueError):
        return tuple(sorted(allowed))
    cpus: set[int] = set()
    for part in filter(None, listed.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    close = sorted(cpus & allowed)
    return tuple(close) if close else tuple(sorted(allowed))
