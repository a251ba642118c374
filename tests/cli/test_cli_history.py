"""`krex ls` (alias `krex history`) and `krex logs`: the commands a runtime
remembers, with filters, and a command's output after it ended or while it
runs. Driven through the real `krex` against one runtime (simulated GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from runtime_helpers import PY, module_runtime

from krex_runtime.host.fair_share import key_of_user
from krex_runtime.testing.local_runtime import Runtime, command
from krex_runtime.wire.protocol import history


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    yield from module_runtime(tmp_path_factory.mktemp("history") / "rt", policy="krex", sim=1, slots=8)


def listed(rt: Runtime, *args: str) -> list[dict]:
    done = rt.krex("ls", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["commands"]


def test_ls_lists_commands_with_state_user_label_and_filters(rt: Runtime) -> None:
    ok = json.loads(rt.krex("run", "--json", "--label", "bench-a", "--", "true").stdout)["id"]
    bad = json.loads(rt.krex("run", "--json", "--label", "bench-b", "--share", "agent7", "--", "false").stdout)["id"]
    sleeper = rt.krex("submit", "--label", "other", "--", PY, "-c", "import time; time.sleep(60)").stdout.strip()
    try:
        rows = {r["id"]: r for r in listed(rt)}
        me = key_of_user(os.geteuid())
        assert rows[ok]["state"] == "finished" and rows[ok]["exit_code"] == 0 and rows[ok]["label"] == "bench-a"
        assert rows[bad]["state"] == "failed" and rows[bad]["exit_code"] == 1  # `finished` is exit status 0
        assert rows[bad]["user"] == me and rows[bad]["share"] == f"{me}/agent7"
        assert rows[sleeper]["state"] in ("queued", "running") and rows[sleeper]["argv"][0] == PY
        assert {r["id"] for r in listed(rt, "--label", "bench-*")} == {ok, bad}
        assert {r["id"] for r in listed(rt, "--state", "active")} == {sleeper}
        assert {r["id"] for r in listed(rt, "--state", "finished", "--label", "bench-*")} == {ok}
        assert {r["id"] for r in listed(rt, "--state", "failed", "--label", "bench-*")} == {bad}
        assert listed(rt, "--user", "nobody-at-all") == []
        assert {ok, bad, sleeper} <= {r["id"] for r in listed(rt, "--user", me, "--since", "1h")}
        assert listed(rt, "--until", "1h") == []
        # The table: whole ids (they go into krex logs and cancel), and `history` is the same list.
        table = rt.krex("ls")
        assert table.returncode == 0 and table.stdout.startswith("ID ")
        assert table.stdout.splitlines()[0].split()[:9] == ["ID", "STATE", "EXIT", "GPU", "USER", "LABEL", "SUBMITTED",
                                                            "WAIT", "RUN"]
        row = next(line.split() for line in table.stdout.splitlines() if line.startswith(bad))
        assert row[1:4] == ["failed", "1", "0"] and row[8].endswith("s"), row  # its GPU, then how long it queued
        for cid in (ok, bad, sleeper):
            assert cid in table.stdout.split()
        assert rt.krex("history").stdout.splitlines()[0] == table.stdout.splitlines()[0]
        wrong = rt.krex("ls", "--state", "sleeping")
        assert wrong.returncode == 125 and "no state 'sleeping'" in wrong.stderr
        when = rt.krex("ls", "--since", "yesterday-ish")
        assert when.returncode == 125 and "is not a time" in when.stderr and "Traceback" not in when.stderr
    finally:
        rt.krex("cancel", sleeper)
    assert listed(rt, "--state", "cancelled")[-1]["id"] == sleeper


def test_logs_of_an_ended_command_tail_and_stderr(rt: Runtime) -> None:
    script = "import sys\nfor i in range(5): print('line', i)\nprint('oops', file=sys.stderr)"
    cid = json.loads(rt.krex("run", "--json", "--", PY, "-c", script).stdout)["id"]
    both = rt.krex("logs", cid)
    assert both.returncode == 0 and both.stdout == "".join(f"line {i}\n" for i in range(5)) and both.stderr == "oops\n"
    assert rt.krex("logs", "--tail", "2", cid).stdout == "line 3\nline 4\n"
    only = rt.krex("logs", "--stderr", cid)
    assert only.stdout == "" and only.stderr == "oops\n"
    doc = json.loads(rt.krex("logs", "--json", cid).stdout)
    assert doc == {"id": cid, "state": "finished", "stdout": both.stdout, "stderr": "oops\n"}
    unknown = rt.krex("logs", "nope-1")
    assert unknown.returncode == 125 and "no command 'nope-1'" in unknown.stderr


def test_logs_follow_prints_a_running_command_until_it_ends(rt: Runtime, tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = (f"import os, time\nprint('first', flush=True)\n"
              f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\nprint('second')")
    cid = rt.krex("submit", "--", PY, "-c", script).stdout.strip()
    follow = subprocess.Popen([*command("krex"), "logs", "--follow", cid], env=rt.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None and follow.stdout.readline() == "first\n"
        go.touch()
        out, err = follow.communicate(timeout=60)
    finally:
        if follow.poll() is None:
            follow.kill()
    assert follow.returncode == 0 and out == "second\n", err
    assert rt.krex("logs", cid).stdout == "first\nsecond\n"


def test_when_takes_ages_unix_seconds_and_clock_times() -> None:
    now = time.time()
    assert abs(history.parse_when("10m") - (now - 600)) < 5
    assert history.parse_when("1700000000") == 1700000000.0
    assert history.parse_when("2026-12-03T14:00") > 1.7e9
    # As `date -d` and dashboards write them: now, now-1h, today, yesterday (their start, local time).
    assert abs(history.parse_when("now-1h") - (now - 3600)) < 5 and abs(history.parse_when("now") - now) < 5
    midnight = datetime.combine(datetime.now().date(), datetime.min.time()).timestamp()
    assert history.parse_when("today") == midnight and history.parse_when("yesterday") == midnight - 86400
    with pytest.raises(ValueError, match="is not a time"):
        history.parse_when("soon")


def test_logs_reads_whole_characters_until_the_command_has_ended(tmp_path: Path) -> None:
    """A character half written is left for the next read while the command
    runs; once it has ended, what is there is the output (bad bytes replaced)."""
    from krex_runtime.service.handlers import output_file_part

    out = tmp_path / "x.stdout"
    out.write_bytes("né".encode() + "€".encode()[:2])
    running = output_file_part(out, 0, None, final=False)
    assert running == {"data": "né", "next": 3, "more": False}
    assert output_file_part(out, 3, None, final=True) == {"data": "\ufffd", "next": 5, "more": False}
    assert output_file_part(tmp_path / "gone", 0, None, final=True) is None
    out.write_text("a\nb\nc\n")
    assert output_file_part(out, 0, 2, final=True) == {"data": "b\nc\n", "next": 6, "more": False}
