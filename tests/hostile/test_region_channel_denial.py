"""One tenant cannot deny the region channel to another: connections are
counted per tenant, not per uid (tenants here share one uid, the runtime's),
a tenant's first connection is accepted even when the channel is full, and
connections that idle after their HELLO are closed."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import psutil
from runtime_helpers import PY, TENANTS, command_pid, krex_runtime, submit

from krex_runtime.node import native_build
from krex_runtime.testing.local_runtime import wait_until

IDLE_S = 8.0
CAP = 4  # per tenant, and the channel's total


def _open_connections(pid: int) -> int:
    try:
        return len(psutil.Process(pid).net_connections("unix"))
    except psutil.Error:
        return 0


def test_idle_connections_of_one_tenant_do_not_deny_another_its_region(make_runtime: Any) -> None:
    rt = krex_runtime(make_runtime, channel_max_connections=4, channel_max_connections_per_uid=4,
                      channel_max_connections_per_tenant=4, channel_idle_timeout_s=IDLE_S)
    go = rt.root / "go"
    steps = [[n, "{hello}\n"] for n in range(CAP)]
    steps += [[CAP, "{hello}\n", "all"], ["wait", str(go)], [0, "", "all"]]
    (rt.root / "hog.json").write_text(json.dumps(steps))
    hog = submit(rt, PY, str(TENANTS / "channel_probe.py"), str(rt.root / "hog.json"))
    pid = wait_until(lambda: command_pid(rt, hog), 60, "the hog to start")
    # The hog holds the whole channel: its cap (4) of idle connections, which is the channel's total too.
    wait_until(lambda: _open_connections(pid) >= CAP, 60, "the hog's idle connections")
    t0 = time.monotonic()
    other = rt.krex("run", "--json", "--", PY, "-c", "from krex_runtime.client import region\nwith region(): print('measured')")
    assert other.returncode == 0, other.stderr
    assert "measured" in other.stdout
    assert time.monotonic() - t0 < IDLE_S, "the other tenant's region came after the hog's connections timed out"
    go.touch()
    done = json.loads(rt.krex("wait", "--json", hog).stdout)
    assert done["state"] == "finished", done
    replies = json.loads((rt.run_dir / "output" / f"{hog}.stdout").read_text().splitlines()[-1])
    assert replies[:4] == ["OK"] * 4, replies
    assert re.fullmatch(r"ERROR EAGAIN command \S+ has its limit of 4 region channel connections", replies[4][0]), replies
    # The rest were closed for idling after their HELLO.
    assert replies[-1] == [f"ERROR ETIMEDOUT idle for {IDLE_S:g} s: disconnecting", "<closed>"], replies


def test_the_clients_open_a_new_connection_after_an_idle_close(make_runtime: Any) -> None:
    rt = krex_runtime(make_runtime, channel_idle_timeout_s=0.5)
    code = (
        "import time\nfrom krex_runtime.client import region\n"
        "with region(): pass\ntime.sleep(1.5)\nwith region(): print('second region')\n"
    )
    done = rt.krex("run", "--", PY, "-c", code)
    assert done.returncode == 0 and "second region" in done.stdout, done.stderr
    tool = native_build.native_dir() / "tests" / "region_client"  # the C client (libkrex.so)
    done = rt.krex("run", "--", str(tool), "enter", "exit", "pause", "enter", "exit")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == ["enter 0", "exit 0", "enter 0", "exit 0"], done.stdout
