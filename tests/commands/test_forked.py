"""Forked mode's own cases: the zygote refuses what is unsafe to fork from,
and a zygote that dies is replaced while its commands fail cleanly. (Its
behaviour from outside is tested with the other modes: tests/commands/test_modes.py,
tests/commands/test_pool.py.)"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import PY, TENANTS, all_gone, trace_events, tree_pids

from krex_runtime.testing.local_runtime import Runtime, wait_until

PRELOADED = TENANTS / "preloaded"


def forked_runtime(make_runtime: Any, preload: list[str], **kwargs: Any) -> Runtime:
    pool = f"\n[pool]\npreload = {json.dumps(preload)}\nzygote = true\n"
    return make_runtime(
        sim=1, extra_config=pool, runtime_env={"PYTHONPATH": os.pathsep.join([str(PRELOADED), os.environ.get("PYTHONPATH", "")])},
        **kwargs,
    )


def zygote(rt: Runtime) -> dict[str, Any]:
    with rt.client() as c:
        return c.call("status")["gpus"][0]["zygote"]


@pytest.mark.parametrize(
    "module, says",
    [
        ("unsafe_thread", "importing 'unsafe_thread' started 1 thread(s) (stand-in-watchdog)"),
        ("unsafe_driver", "importing 'unsafe_driver' initialised the CUDA driver"),
    ],
)
def test_an_unsafe_preload_is_refused_with_the_module_and_what_it_did(make_runtime, module: str, says: str) -> None:
    rt = forked_runtime(make_runtime, ["json", module])
    wait_until(lambda: zygote(rt).get("state") == "failed", 60, "the zygote to refuse")
    assert says in zygote(rt)["reason"], zygote(rt)
    done = rt.krex("run", "--mode", "forked", "--", PY, "-c", "print('never')")
    assert done.returncode == 125 and "forked mode is unavailable: unsafe preload: " + says in done.stderr, done.stderr
    failed = trace_events(rt, "zygote_failed")
    assert len(failed) == 1 and says in failed[0]["reason"]
    # Process mode is unaffected.
    assert rt.krex("run", "--", PY, "-c", "print('fine')").stdout == "fine\n"


def test_a_queued_forked_command_fails_when_its_zygote_refuses(make_runtime) -> None:
    rt = forked_runtime(make_runtime, ["unsafe_thread"])
    done = rt.krex("run", "--mode", "forked", "--json", "--", PY, "-c", "print('never')")
    # Submitted before or after the refusal: refused at once, or failed from the queue.
    assert done.returncode in (125, 1) and "started 1 thread(s)" in done.stderr + done.stdout, done


def test_a_zygote_that_dies_is_replaced_and_its_command_fails(make_runtime, tmp_path: Path) -> None:
    rt = forked_runtime(make_runtime, ["krex_runtime.sim.simcuda"])
    wait_until(lambda: zygote(rt).get("state") == "ready", 60, "the zygote")
    first = zygote(rt)
    marker = tmp_path / "started"
    code = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(600)"
    command_id = rt.krex("submit", "--mode", "forked", "--", PY, "-c", code).stdout.strip()
    wait_until(marker.exists, 30, "the forked command to start")
    os.kill(first["pid"], signal.SIGKILL)
    result = json.loads(rt.krex("wait", "--json", command_id).stdout)
    assert result["state"] == "failed" and "its zygote ended while it ran" in result["reason"], result
    wait_until(lambda: zygote(rt).get("state") == "ready" and zygote(rt)["id"] != first["id"], 60, "a new zygote")
    assert zygote(rt)["restarts"] == 1
    done = rt.krex("run", "--mode", "forked", "--", PY, "-c", "print('still serving')")
    assert done.returncode == 0 and done.stdout == "still serving\n", done.stderr


def test_without_cgroups_a_cancel_still_ends_the_whole_tree(make_runtime, tmp_path: Path) -> None:
    from test_modes import _started, _tree

    rt = forked_runtime(make_runtime, ["krex_runtime.sim.simcuda"], cgroups="off")
    wait_until(lambda: zygote(rt).get("state") == "ready", 60, "the zygote")
    command_id = rt.krex("submit", "--mode", "forked", "--", PY, "-c", _tree(tmp_path)).stdout.strip()
    wait_until(lambda: _started(tmp_path), 30, "the command tree to start")
    assert rt.krex("cancel", command_id).returncode == 0
    assert json.loads(rt.krex("wait", "--json", command_id).stdout)["state"] == "cancelled"
    wait_until(lambda: all_gone(tree_pids(tmp_path)), 10, "the whole tree to be gone")
    assert zygote(rt)["state"] == "ready"


def test_runtime_stop_ends_forked_commands_and_the_zygote(make_runtime, tmp_path: Path) -> None:
    rt = forked_runtime(make_runtime, ["krex_runtime.sim.simcuda"])
    wait_until(lambda: zygote(rt).get("state") == "ready", 60, "the zygote")
    marker = tmp_path / "started"
    code = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(600)"
    rt.krex("submit", "--mode", "forked", "--", PY, "-c", code)
    wait_until(marker.exists, 30, "the forked command to start")
    assert rt.stop() == 0
    assert [e["reason"] for e in trace_events(rt, "zygote_stopped")] == ["runtime stopping"]
    # The fixture checks that no tenant process (the zygote included) is left.


def test_the_default_mode_serves_commands_that_name_none(make_runtime) -> None:
    rt = forked_runtime(make_runtime, ["krex_runtime.sim.simcuda"], dispatcher_extra='default_mode = "forked"')
    wait_until(lambda: zygote(rt).get("state") == "ready", 60, "the zygote")
    done = rt.krex("run", "--json", "--", PY, "-c", "print('forked by default')")
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[-1])["mode"] == "forked", done.stderr
    done = rt.krex("run", "--mode", "process", "--json", "--", "sh", "-c", "echo any program")
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[-1])["mode"] == "process", done.stderr
    refused = rt.krex("run", "--", "sh", "-c", "true")  # forked mode takes Python entry points only
    assert refused.returncode == 125 and "forked commands run `python" in refused.stderr, refused.stderr


def test_many_forks_at_once_with_large_environments(make_runtime) -> None:
    # Fork messages longer than one write, several on their way at once: each
    # reaches the zygote whole, with its own descriptors.
    rt = forked_runtime(make_runtime, ["krex_runtime.sim.simcuda"], slots=16)
    wait_until(lambda: zygote(rt).get("state") == "ready", 60, "the zygote")
    with rt.client(timeout_s=120) as c:
        ids = []
        for i in range(24):
            env = {**os.environ, "BIG": str(i) * (3000 + 997 * i)}
            code = "import os; print(len(os.environ['BIG']), os.environ['BIG'][:1])"
            body = {"argv": [PY, "-c", code], "mode": "forked", "cwd": "/", "env": env}
            ids.append((i, c.call("submit", body)["id"]))
        for i, command_id in ids:
            result = c.call("wait", {"id": command_id, "attach": False}, timeout=120)
            assert result["exit_code"] == 0, (result["reason"], result)
            assert Path(result["stdout_path"]).read_text() == f"{len(str(i) * (3000 + 997 * i))} {str(i)[0]}\n"
