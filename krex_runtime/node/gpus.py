"""The GPUs a runtime serves: discovered through NVML, or simulated.

A simulated GPU is labelled as such everywhere it appears (name, uuid,
`simulated` flag); its figures are never GPU figures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from krex_runtime.node.config import Config
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

    @property
    def visible_devices(self) -> str:
        """What a tenant's CUDA_VISIBLE_DEVICES names: the UUID on real GPUs, since
        CUDA's default device order need not match NVML's; the index on the
        simulator, which numbers devices itself."""
        return str(self.index) if self.simulated else self.uuid


def simulated_gpus(count: int, device_name: str) -> list[Gpu]:
    if count > MAX_DEVICES:
        raise GpuDiscoveryError(
            f"{count} simulated GPUs asked for (gpus.simulated or --sim); the simulator has at most {MAX_DEVICES}"
        )
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    return [
        Gpu(
            index=i,
            uuid=f"GPU-SIM-{device_name}-{i}",
            name="KREX simulated GPU",
            memory_total=SIMULATED_MEMORY_BYTES,
            cpus=cpus,
            simulated=True,
        )
        for i in range(count)
    ]


def nvml_gpus() -> list[Gpu]:
    hint = "`krex-runtime --sim 2` serves 2 simulated GPUs instead"
    try:
        import pynvml
    except ImportError:
        raise GpuDiscoveryError(f"NVML bindings (nvidia-ml-py) are not installed; {hint}") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise GpuDiscoveryError(f"NVML is not available ({exc}): no NVIDIA driver on this machine? {hint}") from None
    try:
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
    finally:
        pynvml.nvmlShutdown()


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
    gpus = simulated_gpus(count, config.gpus.simulated_device) if count > 0 else nvml_gpus()
    if config.gpus.visible:
        known = {g.index for g in gpus}
        missing = sorted(set(config.gpus.visible) - known)
        if missing:
            raise GpuDiscoveryError(f"gpus.visible names GPU {missing[0]}, which this node does not have")
        gpus = [g for g in gpus if g.index in config.gpus.visible]
    return gpus
