"""A forked command holds nothing of its zygote's: no descriptor but its own
(stdin, its output pipes), so it cannot write into the zygote's log (fds 5 and
6 were the log, open for writing) or speak on its control socket; and the
zygote's command line names nothing of its channel."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from runtime_helpers import tenant_processes, trace_events

from krex_runtime.testing.local_runtime import wait_until

PY = sys.executable
ZYGOTE = '\n[pool]\nsize_per_gpu = 0\nzygote = true\npreload = ["krex_runtime.sim.simcuda"]\n'

HOSTILE = """
import json, os, stat
held = {}
for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
        mode = os.fstat(fd).st_mode
    except OSError:
        continue  # the listing's own descriptor
    held[fd] = target
    if fd > 2 and stat.S_ISREG(mode):
        try:
            os.write(fd, b'{"type": "zygote_failed", "reason": "forged"}\\n' + b"x" * (5 << 20))
        except OSError:
            pass
    if stat.S_ISSOCK(mode):
        try:
            os.write(fd, b'{"type": "exited", "id": "nobody", "pid": 1, "status": 0}\\n')
        except OSError:
            pass
print(json.dumps(held))
"""


def test_a_forked_child_holds_only_its_own_descriptors(make_runtime: Any, tmp_path: Path) -> None:
    rt = make_runtime(sim=1, extra_config=ZYGOTE)

    def zygote() -> dict[str, Any]:
        with rt.client() as c:
            return c.call("snapshot")["state"]["gpus"][0]["zygote"]

    wait_until(lambda: zygote().get("state") == "ready", 60, "the zygote to be ready")
    logs = list((rt.run_dir / "pool").glob("zygote-*.log"))
    assert len(logs) == 1
    size_before = logs[0].stat().st_size
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE)
    done = rt.krex("run", "--json", "--mode", "forked", "--", PY, str(script))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    held = {int(fd): target for fd, target in json.loads(result["stdout"]).items()}
    assert set(held) == {0, 1, 2}, held
    assert held[0] == "/dev/null" and held[1].startswith("pipe:") and held[2].startswith("pipe:"), held
    # The zygote's log got nothing, and the zygote serves on, never restarted.
    assert logs[0].stat().st_size == size_before
    assert "zygote_failed" not in logs[0].read_text()
    assert trace_events(rt, "zygote_failed") == [] and trace_events(rt, "zygote_stopped") == []
    again = rt.krex("run", "--mode", "forked", "--", PY, "-c", "print('forked again')")
    assert again.returncode == 0 and again.stdout == "forked again\n", again.stderr
    # Nothing of its channel is on the zygote's command line.
    zygotes = [p for p in tenant_processes(rt.run_dir) if "krex_runtime.tenant.zygote" in p.cmdline()]
    assert len(zygotes) == 1
    assert zygotes[0].cmdline()[-1] == "krex_runtime.tenant.zygote", zygotes[0].cmdline()
