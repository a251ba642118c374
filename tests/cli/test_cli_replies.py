"""`krex` against a runtime that answers what no runtime should: a fake one
(tests/runtime_helpers.py, FakeRuntime: a real zmq ROUTER on ipc). Every
subcommand meets a reply of the wrong shape in one line on stderr and exit
status 125, never a traceback; strings no terminal can write (lone
surrogates, or anything under an ASCII stdout) and control characters in
what it prints are escaped, never a UnicodeEncodeError, never raw."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from runtime_helpers import Answer, reply

from krex_runtime.testing.local_runtime import command

Start = Callable[..., str]


def krex(endpoint: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command("krex"), "--endpoint", endpoint, *args], capture_output=True, text=True,
                          timeout=120, env=env, errors="surrogateescape")


def answering(verb: str, body: Any) -> Answer:
    """`verb` answered with `body`; anything else with an empty body."""
    return lambda req: [reply(req, body if req["type"] == verb else {})]


ROW = {"id": "c-1", "state": "running", "label": "", "user": "u", "share": "u", "gpu": 0, "mode": "process",
       "submitted_at": 1.0, "started_at": 1.0, "finished_at": None, "exit_code": None, "signal": None,
       "reason": "", "argv": ["sleep", "60"]}

# (krex's arguments, the verb the fake answers wrongly, its reply body, what the one line names)
MALFORMED: list[tuple[list[str], str, Any, str]] = [
    (["ls"], "ls", [1, 2], "the reply to ls: expected a table, got a list"),
    (["ls"], "ls", {"commands": "none"}, "commands: expected a list"),
    (["ls"], "ls", {"commands": [{"label": "x"}]}, "commands[0].id: required key is missing"),
    (["history"], "ls", {"commands": [{**ROW, "exit_code": "zero"}]}, "commands[0].exit_code: expected an integer"),
    (["ls"], "ls", {"commands": [{**ROW, "argv": "sleep 60"}]}, "commands[0].argv: expected a list"),
    (["logs", "c-1"], "logs", {"id": "c-1"}, "the reply to logs: state: required key is missing"),
    (["logs", "c-1"], "logs", {"id": "c-1", "state": "running", "ended": False,
                               "output": {"stdout": {"data": 5, "next": 0}}}, "output.stdout.data: expected a string"),
    (["logs", "--json", "c-1"], "logs", "nothing", "the reply to logs: expected a table"),
    (["lease", "0"], "lease", {"gpu": "zero", "expires_at": 1.0}, "the reply to lease: gpu: expected an integer"),
    (["lease", "0"], "lease", {"gpu": 0}, "expires_at: required key is missing"),
    (["release", "0"], "release", [], "the reply to release: expected a table"),
    (["recycle", "0"], "recycle", {"gpu": 0, "now": False}, "the reply to recycle: workers: required key is missing"),
    (["pause"], "pause", {}, "the reply to pause: paused: required key is missing"),
    (["resume", "--gpu", "0"], "resume", {"resumed": [0]}, "the reply to resume: resumed"),
    (["cancel", "c-1"], "cancel", {"id": "c-1"}, "the reply to cancel: state: required key is missing"),
    (["cancel", "c-1"], "cancel", "cancelled", "the reply to cancel: expected a table"),
    (["cancel", "--yes", "c-1", "c-2"], "cancel", {"id": "c-1", "state": 3}, "the reply to cancel names no state"),
    (["cancel", "--all", "--yes"], "ls", {"commands": [{"id": 7}]}, "commands[0].id: expected a string"),
    (["submit", "--", "true"], "submit", {"id": 5}, "the reply to submit: id: expected a string"),
    (["show", "c-1"], "show", {"id": "c-1", "state": "running", "exit_code": "0"}, "result.exit_code must be an integer"),
    (["show", "c-1"], "show", ["c-1"], "result is list"),
]


@pytest.mark.parametrize("args, verb, body, says", MALFORMED, ids=[f"{i}-{c[0][0]}" for i, c in enumerate(MALFORMED)])
def test_a_malformed_reply_is_one_line_and_exit_125(fake_runtime: Start, args: list[str], verb: str, body: Any,
                                                    says: str) -> None:
    done = krex(fake_runtime(answering(verb, body)), *args)
    assert done.returncode == 125, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "the runtime sent a malformed message" in done.stderr and says in done.stderr, done.stderr
    assert "[bad_message]" in done.stderr, done.stderr


HOSTILE = "bench\udc80\x1b]0;owned\x07\x1b[2J\x9b1m\u202e"  # a lone surrogate, OSC title, clear screen, CSI, RLO
SHOWN = "bench\\udc80\\x1b]0;owned\\x07\\x1b[2J\\x9b1m\\u202e"


def hostile_runtime(req: dict[str, Any]) -> list[Any]:
    """A runtime whose every string is what a hostile submitter chose."""
    row = {**ROW, "id": "c-1", "label": HOSTILE, "argv": ["sh", "-c", HOSTILE]}
    bodies = {
        "ls": {"commands": [row]},
        "status": {"node": "n", "policy": "krex", "pid": 1, "uptime_s": 1.0, "paused": False, "stopping": False,
                   "queued": 0, "totals": {}, "gpus": [{"index": 0, "name": HOSTILE, "slots": 1}],
                   "commands": [{**row, "label": HOSTILE}]},
        "show": {**row, "regions": [{"region": 1, "gpu": 0, "kind": "region", "verdict": HOSTILE, "reason": HOSTILE}],
                 "region_count": 1},
        "cancel": {"id": HOSTILE, "state": "cancelled"},
        "submit": {"id": HOSTILE, "state": "queued"},
    }
    if req["type"] == "logs":  # refused, its reason quoting what the submitter chose
        return [reply(req, ok=False, error={"code": "not_found", "reason": f"no command '{HOSTILE}'"})]
    return [reply(req, bodies.get(req["type"], {}))]


@pytest.mark.parametrize("args", [["ls"], ["history"], ["status"], ["show", "c-1"], ["cancel", "c-1"],
                                  ["submit", "--", "true"], ["logs", "c-1"]])
def test_strings_no_terminal_should_act_on_are_shown_escaped(fake_runtime: Start, args: list[str]) -> None:
    """A lone surrogate once ended `krex ls` in a UnicodeEncodeError for every
    user (F8); ESC sequences were written raw, retitling and clearing the
    reader's terminal (F9). Now both are shown as escapes, and the exit
    status is what it would be for any other string."""
    done = krex(fake_runtime(hostile_runtime), *args)
    assert "Traceback" not in done.stderr, done.stderr
    out = done.stdout + done.stderr
    assert done.returncode == (125 if args[0] == "logs" else 0), out
    assert SHOWN in out, out
    for raw in ("\x1b", "\x07", "\x9b", "\u202e", "\udc80"):
        assert raw not in out, (raw, out)


def test_what_an_ascii_terminal_cannot_write_is_escaped(fake_runtime: Start) -> None:
    """Under an ASCII stdout a plain é in a label is no more a traceback than a lone surrogate is."""
    endpoint = fake_runtime(answering("ls", {"commands": [{**ROW, "label": "café"}]}))
    done = krex(endpoint, "ls", env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "caf\\xe9" in done.stdout, done.stdout

