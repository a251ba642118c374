"""Record the small trace the console's replay and snapshot tests play.

    .venv/bin/python tests/console/record_fixture_trace.py

Runs a real runtime (policy krex, 2 simulated GPUs) through a short scripted
workload — candidates with regions, an operator lease and release, a pause
and resume, a cancelled command — then rewrites what differs per machine and
per run (paths, pids, node name, start time) so the committed file is stable.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from pathlib import Path

from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing.local_runtime import Runtime, wait_until

OUT = Path(__file__).parent / "data" / "small-trace.jsonl"
EPOCH = 1_800_000_000.0
CANDIDATE = ["-m", "krex_runtime.demo.candidate", "--import-s", "0.3", "--compile-s", "0.05", "--repeats", "10"]


def record(root: Path) -> Path:
    rt = Runtime(root, sim=2, policy="krex", slots=3).start()
    try:
        with rt.client(timeout_s=30) as c:
            ids = [c.call("submit", {"argv": [sys.executable, *CANDIDATE, "--kernel-us", str(k)], "label": f"cand-{i}"})["id"]
                   for i, k in enumerate([500, 1000, 2000, 500, 1000])]
            sleeper = c.call("submit", {"argv": ["sleep", "30"], "label": "sleeper", "gpu": 1})["id"]
            c.call("pause", {"gpu": 0})
            time.sleep(0.5)
            c.call("resume", {"gpu": 0})
            c.call("lease", {"gpu": 1, "ttl_s": 30})
            time.sleep(0.4)
            c.call("release", {"gpu": 1})
            for cid in ids:
                c.call("wait", {"id": cid, "attach": False}, timeout=60)
            c.call("cancel", {"id": sleeper})
            wait_until(lambda: rt.krex("status", "--json").returncode == 0, 10)
            time.sleep(0.3)
    finally:
        rt.stop()
        remove_device(rt.device)
    return rt.trace_path


def sanitize(trace: Path) -> list[str]:
    lines = trace.read_text().splitlines()
    header = json.loads(lines[0])
    shift = EPOCH - header["started_at"]
    device = rt_device = header["gpus"][0]["uuid"].rsplit("-", 1)[0]
    out = []
    for n, line in enumerate(lines):
        record = json.loads(line)
        for key in ("started_at", "t"):
            if key in record:
                record[key] = round(record[key] + shift, 6)
        if "node" in record:
            record["node"] = "node-01"
        if record.get("type") == "runtime_started" or n == 0:
            record["pid"] = 4242
            record.pop("config_source", None)
            record.pop("cgroups", None)
        if "argv" in record:
            record["argv"] = ["python" if a == sys.executable else a for a in record["argv"]]
        if "pid" in record and record.get("type") == "command_started":
            record["pid"] = 10000 + int(record["tenant_id"])
        if "drain" in record:
            record["drain"] = {str(10000 + i): v for i, v in enumerate(record["drain"].values())}
        text = json.dumps(record, separators=(",", ":"))
        text = text.replace(rt_device, "GPU-SIM-fixture")
        out.append(re.sub(r"/[^\"]*/run/", "/run/krex/", text))
    del device
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lines = sanitize(record(Path(tmp) / "rt"))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT} ({len(lines) - 1} events)")


if __name__ == "__main__":
    main()
