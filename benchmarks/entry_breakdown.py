"""Where region entry time goes, from runtime traces (`krex bench run --keep`
leaves one per setup under its work dir: NN/run/trace.jsonl).

  python benchmarks/entry_breakdown.py LABEL=TRACE [LABEL=TRACE ...]

Per trace, over its measured regions (`kind` region, not the canary's):
entry p50/p99 (from the region's turn to its grant); `wait` (in line
behind other regions before its turn: queueing, not entry cost); `own`,
entry beyond the drain of real GPU work and the optional settle (close +
quiesce + freeze + pin: what the runtime itself adds); its quiesce,
drain, freeze and settle; `gap`, the part of `wait` the gate stayed open
after the previous release for the work it had held back (regions.gap_s);
`idle %`, the share of the time from the first grant to the last release in
which no region was held (the GPU phases of commands between regions); how
often quiesce waited for a call in progress, by call class; the regions'
certificate verdicts.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from krex_bench.analysis import percentile
from krex_runtime.wire.trace.jsonl import read_trace


def breakdown(path: Path) -> dict:
    events = read_trace(path).events
    granted = [e for e in events if e["type"] == "region_granted" and e.get("kind") == "region"]
    released = [e for e in events if e["type"] == "region_released" and e.get("kind") == "region"]

    def ms(key: str) -> list[float]:
        return [1000 * e.get(key, 0.0) for e in granted]

    own = [1000 * (e["enter_s"] - e.get("drain_s", 0.0) - e.get("settle_s", 0.0)) for e in granted]
    waited: Counter[str] = Counter()
    for e in granted:
        waited.update({cls: 1 for cls in e.get("waited_for") or {}})
    ends = {(r["gpu"], r["region"]): r.get("released_mono_ns") for r in released}
    held = [(e["granted_mono_ns"], ends[e["gpu"], e["region"]]) for e in granted
            if e.get("granted_mono_ns") and ends.get((e["gpu"], e["region"]))]
    span = max((b for _, b in held), default=0) - min((a for a, _ in held), default=0)
    idle = 100 * (1 - sum(b - a for a, b in held) / span) if span > 0 else 0.0
    return {
        "regions": len(granted), "idle": idle,
        "enter": ms("enter_s"), "wait": ms("wait_s"), "own": own, "quiesce": ms("quiesce_s"),
        "drain": ms("drain_s"), "freeze": ms("freeze_s"), "settle": ms("settle_s"), "gap": ms("gap_s"),
        "waited_for": dict(waited), "verdicts": dict(Counter(e.get("verdict", "unknown") for e in released)),
    }  # fmt: skip


def main(argv: list[str]) -> int:
    if not argv or any("=" not in a for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    cols = ("enter", "wait", "own", "quiesce", "drain", "freeze", "settle", "gap")
    print(f"{'setup':<34} {'n':>3} " + " ".join(f"{c + ' p50/p99 ms':>20}" for c in cols) + " idle %  waited for  verdicts")
    for arg in argv:
        label, path = arg.split("=", 1)
        b = breakdown(Path(path))
        cells = " ".join(f"{percentile(b[c], 0.5):>9.1f}/{percentile(b[c], 0.99):<10.1f}" for c in cols)
        print(f"{label:<34} {b['regions']:>3} {cells} {b['idle']:>6.1f}  {b['waited_for']}  {b['verdicts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
