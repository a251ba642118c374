"""The GPUs a runtime serves: discovered through NVML or AMD SMI, or simulated.

A simulated GPU is labelled as such everywhere it appears (name, uuid,
`simulated` flag); its figures are never GPU figures. Every GPU says whose
it is (`vendor`): an NVIDIA GPU's tenants get the CUDA interception library
and CUDA_VISIBLE_DEVICES, an AMD GPU's the HIP one and HIP/ROCR_VISIBLE_DEVICES
(commands/environment.py). A node may hold both (`gpus.simulated` and
`gpus.simulated_amd`; `gpus.vendor = "all"`): each GPU has its own gate and
region queue whatever its vendor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from krex_runtime.node.amd_gpus import AmdDiscoveryError, amd_gpu_records
from krex_runtime.node.config import Config
from krex_runtime.node.vendor_library import library_open
from krex_runtime.sim.layout import MAX_DEVICES

SIMULATED_MEMORY_BYTES = 80 << 30


class GpuDiscoveryError(Exception):
    """No GPU can be served; the message says what to do instead."""


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_total: int
    cpus: tuple[int, ...]
    simulated: bool
    vendor: str = "nvidia"  # "nvidia" or "amd"

    @property
    def visible_devices(self) -> str:
        """What a tenant's CUDA_VISIBLE_DEVICES names: the UUID on real GPUs, since
        CUDA's default device order need not match NVML's; the index on the
        simulator, which numbers devices itself."""
        return str(self.index) if self.simulated else self.uuid

    @property
    def visibility_env(self) -> dict[str, str]:
        """The variables that show a tenant this GPU alone. AMD: HIP_VISIBLE_DEVICES
        takes indices only; ROCR_VISIBLE_DEVICES (under HIP) takes the UUID on
        real GPUs. The simulated HIP runtime reads HIP_VISIBLE_DEVICES."""
        if self.vendor == "amd":
            return {"HIP_VISIBLE_DEVICES": "0" if not self.simulated else str(self.index),
                    "ROCR_VISIBLE_DEVICES": self.visible_devices}
        return {"CUDA_VISIBLE_DEVICES": self.visible_devices}


def simulated_gpus(count: int, device_name: str, amd: int = 0) -> list[Gpu]:
    """`count` simulated NVIDIA GPUs, then `amd` simulated AMD ones, all
    devices of one simulated device file."""
    if count + amd > MAX_DEVICES:
        raise GpuDiscoveryError(
            f"{count + amd} simulated GPUs asked for ({'gpus.simulated, gpus.simulated_amd' if amd else 'gpus.simulated'} or --sim); "
            f"the simulator has at most {MAX_DEVICES}"
        )
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    return [
        Gpu(
            index=i,
            uuid=f"GPU-SIM-{device_name}-{i}" if i < count else f"GPU-SIM-AMD-{device_name}-{i}",
            name="KREX simulated GPU" if i < count else "KREX simulated AMD GPU",
            memory_total=SIMULATED_MEMORY_BYTES,
            cpus=cpus,
            simulated=True,
            vendor="nvidia" if i < count else "amd",
        )
        for i in range(count + amd)
    ]


def amd_gpus(first_index: int = 0) -> list[Gpu]:
    """AMD SMI's GPUs (node/amd_gpus.py), numbered from `first_index`."""
    try:
        records = amd_gpu_records()
    except AmdDiscoveryError as exc:
        raise GpuDiscoveryError(str(exc)) from None
    return [
        Gpu(index=first_index + n, uuid=r["uuid"], name=r["name"], memory_total=r["memory_total"],
            cpus=r["cpus"], simulated=False, vendor="amd")
        for n, r in enumerate(records)
    ]


def nvml_gpus() -> list[Gpu]:
    hint = "`krex-runtime --sim 2` serves 2 simulated GPUs instead"
    try:
        import pynvml
    except ImportError:
        raise GpuDiscoveryError(f"NVML bindings (nvidia-ml-py) are not installed; {hint}") from None
    with library_open(pynvml.nvmlInit, pynvml.nvmlShutdown, pynvml.NVMLError, GpuDiscoveryError, "NVML", "NVIDIA",
                      hint):
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            raise GpuDiscoveryError(f"NVML found no GPU on this machine; {hint}")
        gpus = []
        for i in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append(
                Gpu(
                    index=i,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory_total=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    cpus=_nvml_affinity(pynvml, handle),
                    simulated=False,
                )
            )
        return gpus


def _nvml_affinity(pynvml, handle) -> tuple[int, ...]:  # type: ignore[no-untyped-def]
    """The cores NVML calls close to the GPU; every core we may use when it cannot say."""
    allowed = os.sched_getaffinity(0)
    words = ((os.cpu_count() or 64) + 63) // 64
    try:
        mask = pynvml.nvmlDeviceGetCpuAffinity(handle, words)
    except pynvml.NVMLError:
        return tuple(sorted(allowed))
    cpus = [w * 64 + b for w, word in enumerate(mask) for b in range(64) if word >> b & 1]
    close = sorted(set(cpus) & allowed)
    return tuple(close) if close else tuple(sorted(allowed))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def discover(config: Config, sim_override: int | None = None) -> list[Gpu]:
    count = sim_override if sim_override is not None else config.gpus.simulated
    amd = config.gpus.simulated_amd
    if count + amd > 0:
        gpus = simulated_gpus(count, config.gpus.simulated_device, amd)
    elif config.gpus.vendor == "amd":
        gpus = amd_gpus()
    elif config.gpus.vendor == "all":
        gpus = _both_vendors()
    else:
        gpus = nvml_gpus()
    if config.gpus.visible:
        known = {g.index for g in gpus}
        missing = sorted(set(config.gpus.visible) - known)
        if missing:
            raise GpuDiscoveryError(f"gpus.visible names GPU {missing[0]}, which this node does not have")
        gpus = [g for g in gpus if g.index in config.gpus.visible]
    return gpus


def _both_vendors() -> list[Gpu]:
    """NVML's GPUs, then AMD SMI's; an error only when neither has one."""
    found: list[Gpu] = []
    reasons = []
    for vendor in ("nvidia", "amd"):
        try:
            found += nvml_gpus() if vendor == "nvidia" else amd_gpus(len(found))  # AMD's numbered after NVIDIA's
        except GpuDiscoveryError as exc:
            reasons.append(str(exc))
    if not found:
        raise GpuDiscoveryError(" / ".join(reasons))
    return found
