"""Strings a submitter chooses (its argv, label, environment) reach every
user who lists commands (docs/security.md, "What `krex` prints": F8, F9).
A string that is not Unicode text (a lone surrogate, sent as JSON's
`\\udc80`) is refused at the control socket, so it never reaches a listing;
control characters are accepted (an argv may need them) and every `krex`
view shows them escaped, never acting on the reader's terminal. One runtime
(simulated GPU) serves the module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import PY, module_runtime

from krex_runtime.testing.local_runtime import Runtime


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    yield from module_runtime(tmp_path_factory.mktemp("strings") / "rt", policy="krex", sim=1, slots=8)


NOT_TEXT = [
    ("argv", {"argv": ["echo", "a\udc80"]}, "body.argv[1]"),
    ("label", {"argv": ["true"], "label": "x\udcff"}, "body.label"),
    ("env value", {"argv": ["true"], "env": {"A": "\ud800"}}, "body.env.A"),
    ("env name", {"argv": ["true"], "env": {"A\udc80": "1"}}, "body.env.A\\udc80"),
    ("share", {"argv": ["true"], "share": "\udc80"}, "body.share"),
]


@pytest.mark.parametrize("field, body, where", NOT_TEXT, ids=[c[0] for c in NOT_TEXT])
def test_a_submit_holding_a_lone_surrogate_is_refused(rt: Runtime, field: str, body: dict[str, Any], where: str) -> None:
    """Sent as raw bytes on the control socket (json.dumps writes the surrogate
    as its \\u escape): refused as bad_request naming the field; nothing is
    queued and every user's `krex ls` still reads."""
    frame = '{"v": 1, "type": "submit", "id": "raw-1", "time": 0, "body": ' + json.dumps(body) + "}"
    assert "\\ud" in frame  # the escape itself goes on the wire, as a hostile client writes it
    with rt.client() as control:
        control.send_raw(frame.encode())
        answer = control.receive(30)
    assert answer is not None and answer["re"] == "raw-1"
    assert answer["ok"] is False, answer
    assert answer["error"]["code"] == "bad_request", answer
    assert answer["error"]["reason"].startswith(f"{where}: holds a lone surrogate"), answer
    listed = rt.krex("ls")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr


# A title set (OSC 0), the screen cleared, a carriage return and newline that
# forge a row of `krex ls`, a C1 CSI, a right-to-left override.
LABEL = "evil\x1b]0;pwned\x07\x1b[2J\r\nc-forged  finished  0\x9b2J\u202e"
ARGV_TAIL = "# \x1b[31mred\x1b[0m [/bold]"


def test_control_characters_a_submitter_chose_are_shown_escaped(rt: Runtime) -> None:
    cid = rt.krex("submit", "--label", LABEL, "--", PY, "-c", "import time; time.sleep(60)", ARGV_TAIL).stdout.strip()
    try:
        for args in (["ls"], ["history"], ["status"], ["show", cid], ["ls", "--label", "evil*"]):
            done = rt.krex(*args)
            assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stderr)
            for raw in ("\x1b", "\x07", "\r", "\x9b", "\u202e"):
                assert raw not in done.stdout, (args, raw, done.stdout)
            assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\r\\nc-forged" in done.stdout, (args, done.stdout)
            assert not any(line.startswith("c-forged") for line in done.stdout.splitlines()), (args, done.stdout)
            assert "\\x1b[31mred" in done.stdout, (args, done.stdout)
        # A label of rich markup is a label: `[/bold]` once ended `krex status` in a markup error.
        marked = rt.krex("submit", "--label", "[/bold] [red]x", "--", PY, "-c", "import time; time.sleep(60)")
        status = rt.krex("status")
        assert status.returncode == 0 and "[/bold] [red]x" in status.stdout, status.stderr
        rt.krex("cancel", marked.stdout.strip())
    finally:
        done = rt.krex("cancel", cid)
    assert done.returncode == 0 and done.stdout == f"{cid}: cancelled\n"


def test_printable_escapes_what_would_act_and_keeps_what_reads() -> None:
    from krex_runtime.wire.printable import printable  # the views' one helper (wire/printable.py)

    assert printable("bench-7 é 漢字 😀 C:\\path\\x1b") == "bench-7 é 漢字 😀 C:\\path\\x1b"  # kept, backslashes too
    assert printable("a\tb\nc\rd") == "a\\tb\\nc\\rd"
    assert printable("\x00\x1b\x7f\x85\x9b") == "\\x00\\x1b\\x7f\\x85\\x9b"
    assert printable("\u202e\u2066\u2028\u2029") == "\\u202e\\u2066\\u2028\\u2029"
    assert printable("\udc80") == "\\udc80"
    assert printable(None) == "None" and printable(3) == "3"
