"""A restarted runtime still answers for the commands its earlier runs ended
(commands/finished_record.py): `krex wait` on a command the old run
cancelled once answered `not_found`. Real runtimes, stopped and started
again on the same run folder."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from runtime_helpers import submit

from krex_runtime.commands.finished_record import RECORD_FILE, RESTART_REASON
from krex_runtime.testing.local_runtime import Runtime, wait_until


def _result(rt: Runtime, command_id: str) -> dict[str, Any]:
    with rt.client(timeout_s=30) as c:
        return c.call("wait", {"id": command_id, "attach": False})


def _running(rt: Runtime, command_id: str) -> bool:
    with rt.client() as c:
        return any(cmd["id"] == command_id for cmd in c.call("status")["commands"] if cmd["state"] == "running")


def test_after_a_restart_wait_answers_for_what_the_old_run_ended(make_runtime: Any) -> None:
    rt = make_runtime(sim=1)
    cancelled = submit(rt, "sleep", "60")
    wait_until(lambda: _running(rt, cancelled), 30, "the sleeper to run")
    assert rt.krex("cancel", cancelled).returncode == 0
    failed = rt.krex("run", "--label", "three", "--", "sh", "-c", "echo hi; exit 3")
    assert failed.returncode == 3, failed.stderr
    exited = _result(rt, json.loads(rt.krex("submit", "--json", "--", "true").stdout)["id"])["id"]
    assert rt.stop() == 0

    rt.start()
    was = _result(rt, cancelled)
    assert was["state"] == "cancelled" and was["id"] == cancelled, was
    done = rt.krex("wait", "--json", exited)
    assert done.returncode == 0 and json.loads(done.stdout)["state"] == "finished", done.stderr
    ids = [cmd["id"] for cmd in json.loads(rt.krex("status", "--json").stdout)["commands"]]
    assert cancelled not in ids  # the old run's commands are history, not this run's work
    # Attached, a finished command's output comes from its file, then its result.
    three = next(json.loads(line) for line in (rt.run_dir / RECORD_FILE).read_text().splitlines()
                 if json.loads(line).get("result", {}).get("label") == "three")["id"]
    again = rt.krex("wait", three)
    assert again.returncode == 3 and again.stdout == "hi\n", (again.returncode, again.stdout, again.stderr)
    # A cancel of an ended command says how it ended; a new command gets an id of its own.
    assert rt.krex("cancel", cancelled).stdout.strip() == f"{cancelled}: cancelled"
    assert submit(rt, "true").split("-")[0] != cancelled.split("-")[0]


def test_a_command_in_flight_when_its_runtime_died_is_answered_cancelled(make_runtime: Any) -> None:
    rt = make_runtime(sim=1)
    sleeper = submit(rt, "sh", "-c", "echo started; exec sleep 60")
    wait_until(lambda: _running(rt, sleeper), 30, "the sleeper to run")
    rt.stop(signal.SIGKILL)  # no end recorded; its watchdog ends the sleeper

    rt.start()
    was = _result(rt, sleeper)
    assert was["state"] == "cancelled" and was["reason"] == RESTART_REASON, was
    assert was["stdout_path"] and Path(was["stdout_path"]).read_text() == "started\n"


def test_the_record_keeps_what_the_history_keeps(make_runtime: Any) -> None:
    """keep_finished = 3: after a restart the last three are answered, the
    older ones are not found, and the record holds no more lines than that."""
    rt = make_runtime(sim=1, keep_finished=3)
    ids = [json.loads(rt.krex("submit", "--json", "--", "echo", str(n)).stdout)["id"] for n in range(6)]
    for command_id in ids:
        rt.krex("wait", "--json", command_id)
    assert rt.stop() == 0
    rt.start()
    for command_id in ids[-3:]:
        assert _result(rt, command_id)["state"] == "finished"
    for command_id in ids[:3]:
        done = rt.krex("wait", "--json", command_id)
        assert done.returncode != 0 and "not_found" in done.stdout + done.stderr, (done.stdout, done.stderr)
    assert len((rt.run_dir / RECORD_FILE).read_text().splitlines()) == 3
