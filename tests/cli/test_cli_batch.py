"""`krex cancel` of several commands (ids, `--label`, `--state`, `--all`),
confirmed on a terminal or with `--yes` and refused without either, and
`krex show`, one command now without waiting. Driven through the real
`krex` against one runtime (policy krex, simulated GPU)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import PY, TENANTS, module_runtime, regions_config

from krex_runtime.testing.local_runtime import Runtime, command, wait_until

SLEEP = [PY, "-c", "import time; time.sleep(60)"]


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    yield from module_runtime(tmp_path_factory.mktemp("batch") / "rt", policy="krex", sim=1, slots=16,
                              extra_config=regions_config())


def submit(rt: Runtime, label: str, argv: list[str] = SLEEP) -> str:
    done = rt.krex("submit", "--label", label, "--", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def states(rt: Runtime, *ids: str) -> dict[str, str]:
    rows = json.loads(rt.krex("ls", "--json").stdout)["commands"]
    return {r["id"]: r["state"] for r in rows if r["id"] in ids}


def one_line_125(done: subprocess.CompletedProcess[str], says: str) -> None:
    assert done.returncode == 125, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("usage:") and line.startswith("krex")]
    assert len(lines) == 1 and says in lines[0], done.stderr


def test_several_ids_are_confirmed_then_cancelled_and_an_ended_one_is_reported(rt: Runtime) -> None:
    a, b = submit(rt, "ids-a"), submit(rt, "ids-b")
    ended = json.loads(rt.krex("run", "--json", "--label", "ids-done", "--", "true").stdout)["id"]
    # Not a terminal and no --yes: refused in one line, nothing cancelled.
    refused = rt.krex("cancel", a, b, ended)
    one_line_125(refused, "cancel 3 commands: pass --yes to confirm")
    assert set(states(rt, a, b).values()) <= {"queued", "running"}
    done = rt.krex("cancel", "--yes", a, b, ended, "no-such-1")
    assert done.returncode == 125, done.stderr  # the unknown id, after the others are cancelled
    assert done.stdout.splitlines() == [f"{a}: cancelled", f"{b}: cancelled", f"{ended}: had already ended (finished)"]
    one_line_125(done, "no command 'no-such-1'")
    assert states(rt, a, b, ended) == {a: "cancelled", b: "cancelled", ended: "finished"}
    # One id is the verb as it was: no question, and an ended command is no error.
    single = rt.krex("cancel", ended)
    assert single.returncode == 0 and single.stdout == f"{ended}: had already ended (finished)\n"
    assert json.loads(rt.krex("cancel", "--json", ended).stdout) == {"id": ended, "state": "finished"}


def test_a_selection_by_label_state_or_all(rt: Runtime) -> None:
    mine = [submit(rt, f"sel-{i}") for i in range(3)]
    other = submit(rt, "keep-me")
    one_line_125(rt.krex("cancel", "--label", "sel-*"), "cancel 3 commands: pass --yes to confirm")
    chosen = json.loads(rt.krex("cancel", "--label", "sel-*", "--yes", "--json").stdout)
    assert chosen == {"commands": [{"id": i, "state": "cancelled"} for i in mine]}
    assert states(rt, other)[other] in ("queued", "running")  # another label: not chosen
    # --state queued: only those waiting (GPU 0 paused holds new ones in the queue).
    assert rt.krex("pause", "--gpu", "0").returncode == 0
    try:
        waiting = submit(rt, "waiting")
        wait_until(lambda: states(rt, other) == {other: "running"}, 30, "the kept command to run")
        by_state = rt.krex("cancel", "--state", "queued", "--yes")
        assert by_state.returncode == 0 and by_state.stdout == f"{waiting}: cancelled\n", by_state.stderr
        assert states(rt, other, waiting) == {other: "running", waiting: "cancelled"}
    finally:
        rt.krex("resume", "--gpu", "0")
    # A selection that matches nothing cancels nothing, and says so.
    none = rt.krex("cancel", "--label", "no-such-label-*", "--yes")
    assert none.returncode == 0 and none.stdout == "" and "nothing cancelled" in none.stderr
    everything = rt.krex("cancel", "--all", "--yes")
    assert everything.returncode == 0 and f"{other}: cancelled" in everything.stdout.splitlines()
    assert json.loads(rt.krex("ls", "--json", "--state", "active").stdout)["commands"] == []


@pytest.mark.parametrize("args, says", [
    (["cancel"], "no command given"),
    (["cancel", "c-1", "--all"], "give command ids or a selection"),
    (["cancel", "--all", "--label", "x"], "--all takes every queued and running command"),
    (["cancel", "--state", "finished", "--yes"], "only queued and running commands can be cancelled, not finished"),
    (["cancel", "--state", "sleeping"], "no state 'sleeping'"),
])
def test_a_cancel_that_names_nothing_cancellable_is_a_usage_error(rt: Runtime, args: list[str], says: str) -> None:
    one_line_125(rt.krex(*args), says)


def asked_on_a_terminal(rt: Runtime, answer: str, *args: str) -> tuple[int, str, str]:
    """`krex ARGS` with a terminal for stdin, answering its question with `answer`."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*command("krex"), *args], env=rt.env, stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    os.close(slave)
    try:
        os.write(master, answer.encode() + b"\n")
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(master)
    return proc.returncode, out, err


def test_on_a_terminal_the_question_names_the_commands_and_defaults_to_no(rt: Runtime) -> None:
    ids = [submit(rt, "asked"), submit(rt, "asked")]
    code, out, err = asked_on_a_terminal(rt, "", "cancel", "--label", "asked")
    assert code == 0 and out == "" and "cancel 2 commands? [y/N]" in err and "nothing cancelled" in err, err
    assert all(i in err for i in ids), err  # the question names what it would cancel
    assert set(states(rt, *ids).values()) <= {"queued", "running"}
    code, out, err = asked_on_a_terminal(rt, "y", "cancel", *ids)
    assert code == 0 and out.splitlines() == [f"{i}: cancelled" for i in ids], err


def test_show_is_one_command_now_without_waiting(rt: Runtime) -> None:
    running = submit(rt, "shown")
    try:
        wait_until(lambda: states(rt, running) == {running: "running"}, 30, "the command to run")
        doc = json.loads(rt.krex("show", "--json", running).stdout)  # a 60 s sleeper: `wait` would block here
        assert doc["id"] == running and doc["state"] == "running" and doc["exit_code"] is None
        assert doc["label"] == "shown" and doc["gpu"] == 0 and doc["argv"] == SLEEP and doc["finished_at"] is None
        text = rt.krex("show", running).stdout
        fields = {line.split(None, 1)[0]: line.split(None, 1)[1].strip() for line in text.splitlines() if line.strip()
                  and not line.startswith(("queue", "regions"))}
        assert fields["state"] == "running" and fields["label"] == "shown" and fields["gpu"] == "0", text
        assert fields["mode"] == "process" and fields["ended"] == "-" and "time.sleep(60)" in fields["command"], text
        assert "queue wait" in text and "regions: none" in text
    finally:
        rt.krex("cancel", running)
    ended = json.loads(rt.krex("run", "--json", "--label", "regions", "--", PY, str(TENANTS / "regions.py"),
                                "--regions", "2", "--kernel-us", "200").stdout)
    doc = json.loads(rt.krex("show", "--json", ended["id"]).stdout)
    assert doc["state"] == "finished" and doc["exit_code"] == 0 and doc["region_count"] == 2
    assert [r["verdict"] for r in doc["regions"]] == ["verified", "verified"]
    text = rt.krex("show", ended["id"]).stdout
    assert "finished (exit 0)" in text and "regions: 2; verified 2" in text, text
    assert len([line for line in text.splitlines() if line.split()[2:4] == ["region", "verified"]]) == 2, text
    failed = json.loads(rt.krex("run", "--json", "--", "sh", "-c", "exit 3").stdout)["id"]
    assert "failed (exit 3)" in rt.krex("show", failed).stdout
    unknown = rt.krex("show", "no-such-2")
    one_line_125(unknown, "no command 'no-such-2'")
    assert json.loads(rt.krex("show", "--json", "no-such-2").stdout)["error"]["code"] == "not_found"
