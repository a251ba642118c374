"""A dead runtime thaws its tenants: SIGKILLed while a region is held and two
tenants are frozen, its watchdog (service/watchdog.py) thaws them and reopens
the gate within WATCHDOG_BOUND_S (stated in docs/security.md: within a
second; the poll here is generous for a loaded machine), then ends the dead
runtime's commands and leaves nothing behind, and says each step in the
runtime's log."""

from __future__ import annotations

from typing import Any

from runtime_helpers import (
    PY,
    TENANTS,
    busy,
    cgroup_root,
    frozen_cgroups,
    gpu_state,
    killed_for_the_watchdog,
    krex_runtime,
    submit,
    wait_ready,
)

from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import wait_until

WATCHDOG_BOUND_S = 30.0


def test_the_watchdog_thaws_and_cleans_up_after_a_sigkilled_runtime(make_runtime: Any) -> None:
    rt = krex_runtime(make_runtime)
    base = hygiene.baseline()
    others = [busy(rt) for _ in range(2)]
    wait_ready(rt, *others)
    holder = submit(rt, PY, str(TENANTS / "regions.py"), "--regions", "1", "--hold-s", "1000")
    root = cgroup_root(rt)
    assert root is not None
    wait_until(lambda: gpu_state(rt)["region_holder"] is not None and len(frozen_cgroups(root)) == 2, 60,
               "the region held with the others frozen")
    said = killed_for_the_watchdog(rt, base, WATCHDOG_BOUND_S)
    assert "reopened gpu0.gate" in said, rt.log_path.read_text()
    assert sorted(line for line in said if line.startswith("thawed ")) == sorted(
        f"thawed cmd-{c}" for c in (*others, holder)), said
    # Thawed, a tenant whose output pipe went with the runtime may end on its own
    # before the watchdog looks: its cgroup is then removed empty, not ended.
    gone = sorted(line.split(" ")[-1] for line in said if line.startswith(("ended cmd-", "removed empty cmd-")))
    assert gone == sorted(f"cmd-{c}" for c in (*others, holder)), said
