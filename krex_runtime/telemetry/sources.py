"""Where each GPU's metrics and process witness come from: the simulated
device for simulated GPUs, NVML for NVIDIA ones, AMD SMI for AMD ones
(telemetry/amd_smi.py). On a node with both vendors each GPU is asked of its
own vendor's library; a library that cannot be opened makes only its own
GPUs n/a. Neither path has a command-line fallback (nvidia-smi, amd-smi): a
node without the bindings reports n/a.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from krex_runtime.node.gpus import Gpu
from krex_runtime.telemetry.amd_smi import AmdSmiProcesses, AmdSmiSampler
from krex_runtime.telemetry.gpu_metrics import NvmlSampler, SimulatedSampler, UnavailableSampler
from krex_runtime.telemetry.gpu_processes import NoProcesses, NvmlProcesses, SimulatedProcesses


class ByVendor:
    """Sends each call for a GPU to the source of its vendor: a sampler
    (sample, clock_sample, top_clock) or a process witness (running, memory,
    activity, contexts)."""

    def __init__(self, sources: dict[int, Any]) -> None:
        self.sources = sources

    def sample(self, gpu: int) -> dict[str, Any]:
        sample: dict[str, Any] = self.sources[gpu].sample(gpu)
        return sample

    def clock_sample(self, gpu: int) -> dict[str, Any]:
        sample: dict[str, Any] = self.sources[gpu].clock_sample(gpu)
        return sample

    def top_clock(self, gpu: int) -> float | None:
        top: float | None = self.sources[gpu].top_clock(gpu)
        return top

    def clock_history(self, gpu: int, since_us: int) -> list[tuple[int, float]] | None:
        history: list[tuple[int, float]] | None = self.sources[gpu].clock_history(gpu, since_us)
        return history

    def running(self, gpu: int) -> Any:
        return self.sources[gpu].running(gpu)

    def activity(self, gpu: int, since_us: int = 0) -> Any:
        return self.sources[gpu].activity(gpu, since_us)

    def contexts(self, gpu: int) -> Any:
        return self.sources[gpu].contexts(gpu)

    def memory(self, gpu: int) -> Any:
        return self.sources[gpu].memory(gpu)

    def close(self) -> None:
        for source in {id(s): s for s in self.sources.values()}.values():
            getattr(source, "close", lambda: None)()


def _per_vendor(gpus: list[Gpu], opens: dict[str, Callable[[list[Gpu]], Any]], unavailable: Callable[[], Any]) -> Any:
    sources: dict[int, Any] = {}
    for vendor, open_one in opens.items():
        mine = [g for g in gpus if g.vendor == vendor]
        if not mine:
            continue
        try:
            source = open_one(mine)
        except Exception:  # no bindings, no driver: this vendor's GPUs are n/a, the service goes on
            source = unavailable()
        sources |= {g.index: source for g in mine}
    distinct = {id(s): s for s in sources.values()}
    if len(distinct) == 1:
        return next(iter(distinct.values()))
    return ByVendor(sources) if sources else unavailable()


def open_sampler(gpus: list[Gpu], simulated_device: str) -> Any:
    if gpus and gpus[0].simulated:
        return SimulatedSampler(simulated_device, gpus[0].memory_total)
    return _per_vendor(gpus, {"nvidia": NvmlSampler, "amd": AmdSmiSampler}, UnavailableSampler)


def open_processes(gpus: list[Gpu], simulated_device: str) -> Any:
    if gpus and gpus[0].simulated:
        return SimulatedProcesses(simulated_device)
    return _per_vendor(gpus, {"nvidia": NvmlProcesses, "amd": AmdSmiProcesses}, NoProcesses)
