"""What perturbed a region while it was held, besides other tenants' GPU work:
the evidence that tells a faithful measurement from a perturbed one.

The gate and the process list (certificate.py) prove exclusivity: nobody
else's work ran. A region can be exclusive and its trials still slower than
alone. Each reading below is taken at the grant and at the release (never in
between: observing must not perturb), and each finding carries its figure:

- **cpu**: the holder's measuring thread, from the kernel's scheduler
  statistics (/proc/PID/task/TID/schedstat: nanoseconds spent waiting on a run
  queue; status: involuntary switches). A thread that waits for a core
  between its launches leaves the GPU idle inside the timed window. Perturbed
  when the wait passes `cpu_wait_share` of the hold (and `cpu_wait_min_ms`).
  With it, a figure and no judgement: how many cores the other tenants kept
  busy meanwhile (their cgroups' CPU time): on the H100 their load went with
  a uniform slowdown of a process-mode holder's trials that the thread's own
  statistics do not show (docs/BENCHMARKS.md).
- **tenants**: other tenants' processes the entry left inside a context
  creation or module load (region_entry.py waits for them, bounded, before
  the close; past the bound they overlap the hold): perturbed, they slowed
  trials by up to 38% on the H100. And those that used CUDA at the grant and
  had ended by the release (their contexts torn down inside the region): a
  note, their ends did not measurably slow the trials they overlapped.
- **clock**: the SM clock between the grant and the release, from the GPU's
  own sample buffer (NVML's, the simulated device's clock log), not only its
  two ends: its lowest value, a flag when it dipped below the top clock.
  A note, never a perturbation by itself (a long kernel runs under the power
  cap alone too: docs/regions.md).

A reading that fails is None ("n/a") and finds nothing: the certificate
says so and stays what its other witnesses make it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from krex_runtime.regions.gate.kernel import process_alive


@dataclass(frozen=True)
class ThreadCpu:
    waited_ns: int  # on a run queue, wanting a core
    involuntary: int  # switched out while it could run


def thread_cpu(pid: int, tid: int) -> ThreadCpu | None:
    """The measuring thread's scheduler statistics now (None: gone, or not kept by this kernel)."""
    if not tid:
        return None
    base = f"/proc/{pid}/task/{tid}"
    try:
        with open(f"{base}/schedstat", "rb") as f:
            waited = int(f.read().split()[1])
        involuntary = 0
        with open(f"{base}/status", "rb") as f:
            for line in f:
                if line.startswith(b"nonvoluntary_ctxt_switches:"):
                    involuntary = int(line.split()[1])
        return ThreadCpu(waited, involuntary)
    except (OSError, ValueError, IndexError):
        return None


class ClockHistory(Protocol):
    """telemetry/gpu_metrics.py: the SM clock's samples since a wall-clock time."""

    def clock_history(self, gpu: int, since_us: int) -> list[tuple[int, float]] | None: ...  # (wall us, MHz)


class TenantsCpu(Protocol):
    """host/cgroups.py's slice: CPU time of every tenant, or of one process's cgroup."""

    def cpu_usec(self, pid: int | None = None) -> int | None: ...


@dataclass(frozen=True)
class HoldBounds:
    # Of the hold. On the H100 (docs/BENCHMARKS.md) regions whose measuring
    # thread waited up to 14% of their hold spread as natively: most of a wait
    # falls between trials, or behind work the GPU already has queued. A thread
    # whose core is really shared waits about half its hold, and its trials
    # ran up to 2x slow.
    cpu_wait_share: float = 0.25
    cpu_wait_min_ms: float = 5.0
    clock_tolerance: float = 0.1  # as telemetry.clock_tolerance


@dataclass(frozen=True)
class HoldStart:
    wall_us: int
    mono_ns: int
    cpu: ThreadCpu | None
    others: dict[int, tuple[int, int]]  # other tenants' processes using CUDA at the grant: pid -> (tenant id, start time)
    host_side: dict[int, int]  # left inside a context creation or module load at the grant: pid -> tenant id
    grant_mhz: float | None = None  # the SM clock the grant read
    others_cpu_usec: int | None = None  # CPU time of the tenants but the holder's cgroup, so far


@dataclass(frozen=True)
class Finding:
    witness: str  # cpu | tenants | clock
    perturbed: bool  # False: a note on the measurement
    text: str
    flag: str | None = None  # for region().flags and the result


@dataclass
class HoldWatch:
    gpu: int
    clocks: ClockHistory | None
    top_clock: Callable[[int], float | None]
    bounds: HoldBounds = HoldBounds()
    tenants_cpu: TenantsCpu | None = None

    def start(self, pid: int, tid: int, others: list[Any], host_side: list[Any], grant_mhz: float | None = None) -> HoldStart:
        """`others`: the gate's live entries of the other tenants (pid, tenant_id, start_time, uses_cuda);
        `host_side`: those the entry left inside a host-side call (quiesce.deferred);
        `grant_mhz`: the SM clock the grant read."""
        return HoldStart(
            wall_us=time.time_ns() // 1000,
            mono_ns=time.monotonic_ns(),
            cpu=thread_cpu(pid, tid),
            others={e.pid: (e.tenant_id, e.start_time) for e in others if e.uses_cuda},
            host_side={e.pid: e.tenant_id for e in host_side},
            grant_mhz=grant_mhz,
            others_cpu_usec=self._others_cpu(pid),
        )

    def _others_cpu(self, pid: int) -> int | None:
        if self.tenants_cpu is None:
            return None
        try:
            every, holder = self.tenants_cpu.cpu_usec(), self.tenants_cpu.cpu_usec(pid)
        except OSError:
            return None
        return None if every is None or holder is None else every - holder

    def finish(self, start: HoldStart, pid: int, tid: int, release_mhz: float | None = None) -> list[Finding]:
        """What the hold's readings found; `release_mhz`: the SM clock the release read."""
        hold_s = (time.monotonic_ns() - start.mono_ns) / 1e9
        ends = [m for m in (start.grant_mhz, release_mhz) if m]
        found = (self._cpu(start, pid, tid, hold_s), self._tenants(start), self._clock(start, min(ends, default=None)))
        return [f for f in found if f]

    def _cpu(self, start: HoldStart, pid: int, tid: int, hold_s: float) -> Finding | None:
        now = thread_cpu(pid, tid)
        if start.cpu is None or now is None:
            return None
        waited_ms = (now.waited_ns - start.cpu.waited_ns) / 1e6
        switches = now.involuntary - start.cpu.involuntary
        share = waited_ms / 1000 / hold_s if hold_s > 0 else 0.0
        text = f"measuring thread waited {waited_ms:.2f} ms for a core ({share:.2%} of the hold), {switches} involuntary switch(es)"
        others = self._others_cpu(pid)
        if others is not None and start.others_cpu_usec is not None and hold_s > 0:
            text += f"; other tenants kept {(others - start.others_cpu_usec) / 1e6 / hold_s:.1f} core(s) busy"
        if waited_ms >= self.bounds.cpu_wait_min_ms and share > self.bounds.cpu_wait_share:
            return Finding("cpu", True, text, f"cpu:waited-{waited_ms:.1f}ms")
        return Finding("cpu", False, text)

    def _tenants(self, start: HoldStart) -> Finding | None:
        # A zombie has torn down its address space and its GPU context already.
        ended = sorted((t, p) for p, (t, started) in start.others.items() if not process_alive(p, started))
        creating = sorted((t, p) for p, t in start.host_side.items())
        parts = [f"tenant {t} (pid {p}) was creating a context or loading a module" for t, p in creating]
        parts += [f"tenant {t} (pid {p}) ended, its GPU context torn down" for t, p in ended]
        if not parts:
            return None
        flag = f"tenants:{len(ended)}-ended,{len(creating)}-in-driver"
        # A context creation or module load inside the hold slowed trials by up
        # to 38% on the H100; a tenant's end did not measurably (docs/BENCHMARKS.md).
        return Finding("tenants", bool(creating), "; ".join(parts), flag)

    def _clock(self, start: HoldStart, ends_mhz: float | None) -> Finding | None:
        """A dip the grant's and the release's readings did not see (they are flagged on their own)."""
        if self.clocks is None:
            return None
        try:
            samples = self.clocks.clock_history(self.gpu, start.wall_us)
        except Exception:  # missing data is a value
            samples = None
        top = self.top_clock(self.gpu)
        if not samples or not top:
            return None
        low = min(mhz for _, mhz in samples)
        if low >= top * (1 - self.bounds.clock_tolerance) or (ends_mhz is not None and low >= ends_mhz):
            return None  # the ends' readings say it all
        return Finding("clock", False, f"dipped to {low:.0f} MHz (top {top:.0f}) within the hold, {len(samples)} sample(s)",
                       f"clock-dip:{low:.0f}MHz")

