"""Record the trace the trace fuzzer mutates besides the console's fixture: one
with every kind of event (telemetry, canary, context pool, a zygote and its
restart, regions, a lease, a withdrawn request, pause and resume).

    .venv/bin/python tests/fuzz/record_rich_trace.py

Made stable the way the console's fixture is (tests/console/record_fixture_trace.py).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "console"))

from record_fixture_trace import CANDIDATE, sanitize

from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing.local_runtime import Runtime, wait_until

OUT = Path(__file__).parent / "data" / "rich-trace.jsonl"
POOL = '\n[pool]\nsize_per_gpu = 1\npreload = ["krex_runtime.sim.simcuda"]\nzygote = true\n'


def record(root: Path) -> Path:
    rt = Runtime(root, sim=1, policy="krex", slots=3, canary=True, canary_period_s=0.3, extra_config=POOL).start()
    try:
        with rt.client(timeout_s=60) as c:
            wait_until(lambda: c.call("snapshot")["state"]["gpus"][0]["canary"].get("samples", 0) >= 2, 60, "canary")
            ids = [c.call("submit", {"argv": [sys.executable, *CANDIDATE, "--kernel-us", "500"], "label": "cand"})["id"],
                   c.call("submit", {"argv": [sys.executable, "-c", "print('pooled')"], "mode": "pooled"})["id"]]
            sleeper = c.call("submit", {"argv": ["sleep", "30"], "label": "sleeper"})["id"]
            c.call("pause", {})
            c.call("resume", {})
            for cid in ids:
                c.call("wait", {"id": cid, "attach": False})
            c.call("lease", {"gpu": 0, "ttl_s": 30})
            time.sleep(0.3)
            c.call("release", {"gpu": 0})
            c.call("cancel", {"id": sleeper})
            c.call("wait", {"id": sleeper, "attach": False})
            c.call("recycle", {"gpu": 0})

            def pool() -> dict:
                return c.call("snapshot")["state"]["gpus"][0]["pool"]

            wait_until(lambda: pool()["replaced"] == 1 and pool()["idle"] == 1, 60, "a recycled context process")

            def zygote() -> dict:
                return c.call("snapshot")["state"]["gpus"][0]["zygote"]

            wait_until(lambda: zygote().get("state") == "ready", 60, "the zygote")
            forked = c.call("submit", {"argv": [sys.executable, "-c", "print('forked')"], "mode": "forked"})["id"]
            c.call("wait", {"id": forked, "attach": False})
            os.kill(zygote()["pid"], signal.SIGKILL)
            wait_until(lambda: zygote().get("state") == "ready" and zygote()["restarts"] == 1, 60, "a new zygote")
    finally:
        rt.stop()
        remove_device(rt.device)
    return rt.trace_path


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lines = sanitize(record(Path(tmp) / "rt"))
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT} ({len(lines) - 1} events)")


if __name__ == "__main__":
    main()
