"""The region channel under abuse: who may speak for a tenant, and what a peer
can cost. A real runtime under policy krex; the peers are real processes
(tests/tenants/channel_probe.py) on the real socket, run as tenants or as
strangers with a forged environment.

After every abuse a legitimate tenant still enters and leaves a region, and
nothing stays frozen or gated.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest
from region_checks import check_nothing_left
from runtime_helpers import (
    PY,
    TENANTS,
    VENDORS,
    busy,
    cgroup_root,
    check_vendor,
    command_pid,
    finish,
    frozen_cgroups,
    gpu_state,
    krex_runtime,
    regions_config,
    snapshot,
    submit,
    trace_events,
    wait_ready,
)

from krex_runtime.testing.local_runtime import Runtime, wait_until

PROBE = str(TENANTS / "channel_probe.py")
HOLD = [[0, "{hello}\n"], [0, "ENTER {tid}\n"]]  # a tenant's HELLO, then its region


def steps_file(rt: Runtime, steps: tuple[list, ...] | list[list]) -> str:
    path = rt.root / f"probe-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(list(steps)))
    return str(path)


def probe(rt: Runtime, *steps: list) -> list:
    """The replies the runtime gives a tenant that takes `steps`."""
    done = rt.krex("run", "--", PY, PROBE, steps_file(rt, steps))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def as_stranger(rt: Runtime, *argv: str, **env: str) -> str:
    """What a process the runtime did not start prints, its environment forged with `env`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KREX_") and k != "LD_PRELOAD"}
    done = subprocess.run(
        [PY, *argv],
        env=clean | {"KREX_REGION_SOCKET": str(rt.run_dir / "region.sock")} | env,
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def stranger(rt: Runtime, *steps: list, **env: str) -> list:
    """The replies a process the runtime did not start gets, its environment forged with `env`."""
    return json.loads(as_stranger(rt, PROBE, steps_file(rt, steps), **env).splitlines()[-1])


def legitimate_region_works(rt: Runtime, after: str) -> None:
    done = rt.krex("run", "--", PY, "-c", "from krex_runtime.client import region\nwith region(): pass")
    assert done.returncode == 0, f"after {after}: {done.stderr}"
    check_nothing_left(rt.run_dir)
    assert frozen_cgroups(cgroup_root(rt)) == [], f"after {after}"
    assert gpu_state(rt)["region_queue"] == [], f"after {after}"


# --- who may speak for a tenant --------------------------------------------------------


def test_nobody_but_the_holder_can_release_or_take_its_region(make_runtime, tmp_path: Path) -> None:
    rt = krex_runtime(make_runtime)
    other = busy(rt)
    wait_ready(rt, other)
    go = tmp_path / "go"
    wrong_token = "f00d" * 16
    holder = submit(
        rt, PY, PROBE,
        steps_file(rt, [
            *HOLD,
            [1, "{hello}\n"],  # its own second connection: may speak, may not queue a second request
            [1, "ENTER {tid}\n"],
            [1, "EXIT\n"],
            [2, f"HELLO 2 {{tenant}} {{pid}} {wrong_token}\n"],  # its own tenant id, a wrong token
            ["wait", str(go)],
            [0, "EXIT\n"],
        ]),
    )
    wait_until(lambda: gpu_state(rt)["region_holder"] is not None, 60, "the region to be granted")
    held = trace_events(rt, "region_granted")[-1]
    holder_pid = command_pid(rt, holder)
    holder_env = psutil.Process(holder_pid).environ()  # what a process of the same uid can read
    tenant, token = holder_env["KREX_TENANT_ID"], holder_env["KREX_REGION_TOKEN"]
    assert held["tenant_id"] == int(tenant) and len(token) == 64

    another_tenant = probe(
        rt,
        [0, "{hello}\n"],
        [0, "EXIT\n"],
        [1, f"HELLO 2 {tenant} {{pid}} {{token}}\n"],  # the holder's tenant id, its own token
        [2, f"HELLO 2 {tenant} {{pid}} {token}\n"],  # the holder's tenant id and stolen token
        [3, f"HELLO 2 {{tenant}} {holder_pid} {{token}}\n"],  # the holder's pid
        [0, f"ENTER {holder_pid}\n"],  # the holder's thread, for the runtime to pin
        [0, "ENTER {tid}\nEXIT\n", "all"],  # queues behind the holder, then speaks while it waits
    )
    assert another_tenant[:2] == ["OK", "ERROR EINVAL this connection holds no region"]
    assert another_tenant[2] == another_tenant[3]
    assert another_tenant[2].startswith("ERROR EPERM pid ") and f"is not a process of tenant {tenant}" in another_tenant[2]
    assert another_tenant[4].startswith(f"ERROR EPERM the pid in HELLO ({holder_pid}) is not the connecting process")
    assert another_tenant[5].startswith(f"ERROR EINVAL thread {holder_pid} is not a thread of process ")
    assert another_tenant[6] == ["ERROR EPROTO nothing may be sent while ENTER waits: request withdrawn", "<closed>"]

    # A process outside the holder's tree, its environment forged to be the holder's.
    forged = dict(KREX_COMMAND_ID=holder, KREX_TENANT_ID=tenant, KREX_REGION_TOKEN=token)
    strange = stranger(rt, [0, "{hello}\n"], [1, "EXIT\n"], **forged)
    assert strange[0].startswith("ERROR EPERM pid ") and "is not a process of a command running under" in strange[0]
    assert strange[1].startswith("ERROR EPROTO expected HELLO 2 ")
    client = "from krex_runtime.client import RegionError, region\ntry:\n    region().__enter__()\nexcept RegionError as e:\n    print(e)"
    assert "EPERM: pid " in as_stranger(rt, "-c", client, **forged)

    state = gpu_state(rt)
    assert state["region_holder"] == int(tenant) and state["region_queue"] == []
    assert trace_events(rt, "region_granted")[-1]["region"] == held["region"]
    assert not [e for e in trace_events(rt, "region_released") if e["region"] == held["region"]]
    assert frozen_cgroups(cgroup_root(rt)) == [f"cmd-{other}"]

    go.touch()
    done = rt.krex("wait", holder)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [
        "OK",
        f"GRANTED {held['region']}",
        "OK",
        f"ERROR EBUSY process {holder_pid} already holds or awaits a region on another connection",
        "ERROR EINVAL this connection holds no region",
        f"ERROR EPERM wrong region token for tenant {tenant} (the runtime passes it in KREX_REGION_TOKEN)",
        f"RELEASED {held['region']}",
    ]
    legitimate_region_works(rt, "the attempts on the holder's region")
    finish(rt, other)

    # Tokens stay between the runtime and their tenant; refusals are logged without them.
    published = json.dumps(snapshot(rt))
    log = rt.log_path.read_text()
    assert "wrong region token for tenant" in log
    for secret in (token, wrong_token):
        assert secret not in log and secret not in rt.trace_path.read_text() and secret not in published
        assert secret not in json.dumps([another_tenant, strange])




def test_without_cgroups_a_tenant_is_its_command_and_descendants(make_runtime, tmp_path: Path) -> None:
    rt = make_runtime(policy="krex", sim=1, slots=4, cgroups="off", extra_config=regions_config())
    steps = steps_file(rt, [*HOLD, [0, "EXIT\n"]])
    child = f"import subprocess, sys\nsys.exit(subprocess.call([sys.executable, {PROBE!r}, {steps!r}]))"
    done = rt.krex("run", "--", PY, "-c", child)
    assert done.returncode == 0, done.stderr
    replies = json.loads(done.stdout.splitlines()[-1])
    assert replies[0] == "OK" and replies[1].startswith("GRANTED ") and replies[2].startswith("RELEASED ")

    go = tmp_path / "go"
    sitting = submit(rt, PY, PROBE, steps_file(rt, [["wait", str(go)]]))
    pid = wait_until(lambda: command_pid(rt, sitting), 60, "the tenant to start")
    env = psutil.Process(pid).environ()
    forged = {k: env[k] for k in ("KREX_COMMAND_ID", "KREX_TENANT_ID", "KREX_REGION_TOKEN")}
    strange = stranger(rt, [0, "{hello}\n"], **forged)
    assert strange[0].startswith("ERROR EPERM pid ") and "is not a process of a command running under" in strange[0]
    go.touch()
    assert rt.krex("wait", sitting).returncode == 0


# --- what a peer can cost ----------------------------------------------------------------


@pytest.mark.parametrize("vendor", VENDORS)
def test_every_abuse_gets_a_clear_error_and_leaves_nothing_held(make_runtime, vendor: str) -> None:
    """Each abuse, then a legitimate region: the other tenant (HIP on the AMD
    GPU) is frozen, drained and thawed around every one of them."""
    rt = krex_runtime(make_runtime, channel_hello_timeout_s=1.0, channel_max_messages_per_s=5, vendor=vendor)
    other = busy(rt)
    wait_ready(rt, other)
    check_vendor(rt, vendor, other)
    busy_again = "ERROR EBUSY this connection already holds or awaits its region"
    abuses = {
        # As a tenant holding its region: the runtime hangs up, which releases the region.
        "a flood of messages": ([*HOLD, [0, "ENTER {tid}\n" * 40, "all"]], [
            "ERROR EAGAIN rate limit of 5 messages/s exceeded: message ignored, slow down",
            "ERROR EAGAIN rate limit of 5 messages/s exceeded again: disconnecting",
            "<closed>",
        ]),
        "a line too long": ([*HOLD, [0, "EXIT" + " " * 800 + "\n", "all"]], ["ERROR EMSGSIZE line longer than 768 bytes", "<closed>"]),
        "invalid UTF-8": ([*HOLD, [0, "EXIT \u00ff\u00fe\n", "all"]], ["ERROR EPROTO a line is not ASCII text", "<closed>"]),
        "a NUL byte": ([*HOLD, [0, "EXIT\u0000\n", "all"]], ["ERROR EPROTO NUL byte in a line", "<closed>"]),
        # An empty line is only an error: the connection stays, and releases its region itself.
        "an empty line": ([*HOLD, [0, "\n"], [0, "EXIT\n"]], ["ERROR EPROTO empty line", "RELEASED {seq}"]),
    }
    for abuse, (steps, want) in abuses.items():
        replies = probe(rt, *steps)
        assert replies[0] == "OK" and replies[1].startswith("GRANTED "), f"{abuse}: {replies}"
        seq = int(replies[1].split()[1])
        got = replies[2] if isinstance(replies[2], list) else replies[2:]
        within_rate = 0
        while got and got[0] == busy_again:  # the flood's first messages, within the rate
            got, within_rate = got[1:], within_rate + 1
        assert within_rate >= (4 if abuse == "a flood of messages" else 0)  # a second's worth, less the ENTER
        assert got == [w.format(seq=seq) for w in want], f"{abuse}: {replies}"
        legitimate_region_works(rt, abuse)
        released = next(e for e in trace_events(rt, "region_released") if e["region"] == seq)
        assert released["reason"] == ("released" if abuse == "an empty line" else "tenant disconnected")

    strangers = {
        "silence": ([[0, "", "all"]], ["ERROR ETIMEDOUT no HELLO line within 1 s", "<closed>"]),
        "a partial line": ([[0, "HELLO 2", "all"]], ["ERROR ETIMEDOUT no HELLO line within 1 s", "<closed>"]),
        "an old client": ([[0, "HELLO 1 1 {pid}\n", "all"]], [
            "ERROR EPROTO region protocol '1' is not supported: this runtime speaks 2; "
            "use the client (libkrex.so, krex_runtime.client) of the same KREX version",
            "<closed>",
        ]),
        "a line too long": ([[0, "HELLO " + "9" * 800 + "\n", "all"]], ["ERROR EMSGSIZE line longer than 768 bytes", "<closed>"]),
        "invalid UTF-8": ([[0, "\u00ff" * 10 + "\n", "all"]], ["ERROR EPROTO a line is not ASCII text", "<closed>"]),
        "a NUL byte": ([[0, "HELLO\u0000 2\n", "all"]], ["ERROR EPROTO NUL byte in a line", "<closed>"]),
        "an empty line": ([[0, "\n", "all"]], ["ERROR EPROTO expected HELLO 2 <tenant_id> <pid> <token>", "<closed>"]),
    }
    for abuse, (steps, want) in strangers.items():
        assert stranger(rt, *steps) == [want], abuse
        legitimate_region_works(rt, f"a stranger's {abuse}")
    # A malformed or too long settle bound on ENTER: refused, the connection stays.
    bad_enter = "ERROR EINVAL ENTER needs a thread id (and optionally a settle bound in ms)"
    replies = probe(rt, [0, "{hello}\n"], [0, "ENTER {tid} soon\n"], [0, "ENTER {tid} 5000\n"], [0, "ENTER {tid} 10\n"],
                    [0, "EXIT\n"])
    assert replies[:3] == ["OK", bad_enter, "ERROR EINVAL a settle of 5 s is over this node's regions.settle_cap_s (1 s)"]
    assert replies[3].startswith("GRANTED ") and replies[4].startswith("RELEASED "), replies
    finish(rt, other)


@pytest.mark.parametrize("cap", ["total", "per tenant"])
def test_connections_are_capped(make_runtime, cap: str) -> None:
    total = 3 if cap == "total" else 8
    rt = krex_runtime(make_runtime, channel_max_connections=total, channel_max_connections_per_uid=3,
                      channel_max_connections_per_tenant=8 if cap == "total" else 3)
    replies = probe(rt, [0, "{hello}\n"], [1, "{hello}\n"], [2, "{hello}\n"], [3, "", "all"])
    assert replies[:3] == ["OK", "OK", "OK"] and replies[3][1:] == ["<closed>"], replies
    if cap == "total":
        assert replies[3][0] == "ERROR EAGAIN the region channel has its limit of 3 connections"
    else:
        assert re.fullmatch(r"ERROR EAGAIN command \S+ has its limit of 3 region channel connections", replies[3][0])
    legitimate_region_works(rt, "the cap was reached")  # the probe's connections ended with it

