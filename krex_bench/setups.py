"""The setups one evaluation compares: how the same workload is run.

  native         one command at a time, the GPU to itself (policy `command`)
  native-repeat  the same again: the noise floor of every comparison
  ungated        `concurrency` commands at once, no protection
  krex           `concurrency` commands at once, regions protected; one setup
                 per gate backend x mode x protection variant
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from krex_runtime.wire.protocol.bodies import MODES  # process | forked | pooled

BACKENDS = ("preload", "driver-lock")
PROTECTIONS = ("gpu+cpu", "gpu-only")
VARIANTS = tuple(f"{b}/{m}/{p}" for b in BACKENDS for m in MODES for p in PROTECTIONS)
DEFAULT_CONCURRENCY = (4, 8, 16)


# --native: which of the two native runs this invocation measures ("native" and
# "repeat" split them over two invocations on one machine start, each within a
# time limit; the other comes from --merge).
NATIVE_RUNS: dict[str, tuple[str, ...]] = {
    "2": ("native", "native-repeat"), "native": ("native",), "repeat": ("native-repeat",), "0": (),
}


@dataclass(frozen=True)
class Setup:
    kind: str  # native | native-repeat | ungated | krex
    concurrency: int = 1
    gate_backend: str = "preload"
    mode: str = "process"
    protection: str = "gpu+cpu"
    settle_s: float | None = None  # krex only: regions.settle_max_s (None: the runtime's default)
    gap_s: float | None = None  # krex only: regions.gap_s (None: the runtime's default)
    # krex only: candidates whose kernel takes at least candidate.LONG_KERNEL_MS
    # ask their own region for this settle bound (region(settle_s=...)); 0: none asks.
    settle_long_s: float = 0.0
    canary: bool = False  # krex only: telemetry.canary on (off by default)

    @property
    def policy(self) -> str:
        return {"native": "command", "native-repeat": "command", "ungated": "ungated", "krex": "krex"}[self.kind]

    @property
    def variant(self) -> str:
        return f"{self.gate_backend}/{self.mode}/{self.protection}"

    @property
    def label(self) -> str:
        if self.kind in ("native", "native-repeat"):
            return self.kind
        if self.kind == "ungated":
            return f"ungated c{self.concurrency}"
        settle = f" settle {self.settle_s:g}s" if self.settle_s is not None else ""
        gap = f" gap {self.gap_s * 1000:g}ms" if self.gap_s is not None else ""
        long = f" settle-long {self.settle_long_s:g}s" if self.settle_long_s > 0 else ""
        canary = " canary" if self.canary else ""
        return f"krex {self.variant} c{self.concurrency}{settle}{long}{gap}{canary}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label, "policy": self.policy}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Setup:
        return Setup(
            d["kind"], d["concurrency"], d["gate_backend"], d["mode"], d["protection"],
            d.get("settle_s"), d.get("gap_s"),  # an earlier result's 0.0 was no settle: "settle 0s" now
            d.get("settle_long_s", 0.0), d.get("canary", False),
        )


def parse_variant(text: str) -> tuple[str, str, str]:
    parts = text.split("/")
    if len(parts) != 3 or parts[0] not in BACKENDS or parts[1] not in MODES or parts[2] not in PROTECTIONS:
        raise ValueError(f"krex variant {text!r} is not BACKEND/MODE/PROTECTION; choose from {', '.join(VARIANTS)}")
    return parts[0], parts[1], parts[2]


def matrix(
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY,
    variants: tuple[str, ...] = VARIANTS,
    native: int | str = 2,
    ungated: bool = True,
    settles: tuple[float | None, ...] = (None,),
    gaps: tuple[float | None, ...] = (None,),
    settle_longs: tuple[float, ...] = (0.0,),
    canary_too: bool = False,
    native_mode: str = "process",
) -> list[Setup]:
    """Native first (`native` runs: the baseline every other setup is compared
    with, then its repeat), then per concurrency ungated and each krex variant
    (once per value of `settles`, `gaps` and `settle_longs`; None: the runtime's
    default), and with `canary_too` each once more with the canary on."""
    if native_mode not in ("process", "pooled"):
        raise ValueError(f"native mode must be process or pooled, got {native_mode!r}")
    # Native runs one command at a time whatever its mode: pooled only spares each its start-up.
    setups = [Setup(kind, mode=native_mode) for kind in NATIVE_RUNS[str(native)]]
    for c in concurrency:
        if c < 1:
            raise ValueError(f"concurrency must be >= 1, got {c}")
        if ungated:
            setups.append(Setup("ungated", c))
        for text in variants:
            backend, mode, protection = parse_variant(text)
            setups.extend(Setup("krex", c, backend, mode, protection, settle, gap, long, canary)
                          for canary in ((False, True) if canary_too else (False,))
                          for settle in settles for long in settle_longs for gap in gaps)
    return setups
