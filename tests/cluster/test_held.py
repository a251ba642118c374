"""The gateway's held-commands file alone (krex_cluster/held.py) and the
command table's held set: no Ray, no runtime."""

from __future__ import annotations

import asyncio
import json
import logging
import stat
from pathlib import Path
from typing import Any

import pytest

from krex_cluster import held
from krex_cluster.command_table import CommandTable

BODY = {"argv": ["sh", "-c", "echo hi"], "label": "x", "env": {"TOKEN": "secret"}, "node_labels": {"host": "n3"},
        "retries": 2}


def table(on_held: Any = lambda: None) -> CommandTable:
    return CommandTable(100, 1 << 20, lambda *_: None, on_held)


def test_entries_written_are_read_back_the_same_and_only_the_owner_reads_them(tmp_path: Path) -> None:
    t = table()
    first, second = t.new(dict(BODY)), t.new({"argv": ["true"]})
    second.attempts, second.retries_left = 1, 0  # re-placed from a lost node
    t.hold(first)
    t.hold(second)
    path = tmp_path / held.FILE_NAME
    held.write(path, t.held_entries())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [held.FILE_NAME]  # no temporary file left
    entries = held.read(path)
    assert entries == t.held_entries()

    again = table()  # a restarted gateway's
    for entry in entries:
        assert again.restore(entry) is not None
    assert [c.status_row() for c in again.held.values()] == [c.status_row() for c in t.held.values()]
    assert all(c.restored and c.state == "pending" for c in again.held.values())
    assert again.restore(entries[0]) is None  # known already

    held.write(path, [])  # nothing held: the file says so
    assert held.read(path) == []
    assert held.read(tmp_path / "none.json") == []  # no file: normal, nothing held


def test_the_held_set_changes_once_per_change_and_a_node_running_one_takes_it() -> None:
    calls: list[int] = []
    t = table(lambda: calls.append(len(t.held)))
    cmd = t.new(dict(BODY))
    t.hold(cmd)
    t.hold(cmd)
    assert calls == [1]
    t.fail(cmd, "cancelled before it reached a node", state="cancelled")  # ended: no longer held
    assert calls == [1, 0] and not t.held

    restored = table()
    entry = {"id": "cabc-7", "body": dict(BODY), "retries_left": 2, "attempts": 0, "submitted_at": 1.0}
    waiting = restored.restore(entry)
    assert waiting is not None
    # An agent reports it runs it (the earlier gateway sent it just before it died): the same record, not a second.
    adopted = restored.adopt("cabc-7", dict(BODY), {"retries_left": 2, "attempts": 1, "submitted_at": 1.0})
    assert adopted is waiting and not restored.held and not adopted.restored and adopted.attempts == 1
    assert restored.adopt("cabc-7", dict(BODY), {}) is None


@pytest.mark.parametrize("content, says", [
    (None, "is not JSON (torn or overwritten?)"),  # torn: the first half of a good file
    (b"\xff\xfe", "is not JSON"),
    (b'{"format": "something else"}', "is not a held-commands file"),
    (json.dumps({"format": held.FORMAT, "version": 9, "commands": []}).encode(), "has version 9"),
    (json.dumps({"format": held.FORMAT, "version": 1, "commands": [{"id": "a"}]}).encode(),
     "is malformed: commands[0]: retries_left: expected a count"),
    (json.dumps({"format": held.FORMAT, "version": 1, "commands": [
        {"id": "a", "body": {"argv": "ls"}, "retries_left": 0, "attempts": 0, "submitted_at": 1.0}]}).encode(),
     "is malformed: commands[0]: body.argv"),
])
def test_a_bad_file_is_said_in_one_line_and_moved_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                        content: bytes | None, says: str) -> None:
    path = tmp_path / held.FILE_NAME
    if content is None:
        held.write(path, [{"id": "c1-1", "body": dict(BODY), "retries_left": 0, "attempts": 0, "submitted_at": 1.0}])
        content = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(content)
    with caplog.at_level(logging.ERROR, logger="krex.cluster"):
        assert held.load(path) == []
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert str(path) in lines[0] and says in lines[0] and f"moved aside to {path}.bad" in lines[0], lines[0]
    assert not path.exists() and (tmp_path / "held.json.bad").read_bytes() == content  # kept, not deleted
    path.write_bytes(b"[")  # a second bad file does not replace the first one's copy
    assert held.load(path) == [] and (tmp_path / "held.json.bad.1").read_bytes() == b"["


def test_an_unreadable_file_is_said_and_the_writer_keeps_the_held_set_on_disk(tmp_path: Path,
                                                                               caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / held.FILE_NAME).mkdir()  # not a file at all
    with caplog.at_level(logging.ERROR, logger="krex.cluster"):
        assert held.load(tmp_path / held.FILE_NAME) == []
    assert "cannot be read" in caplog.text and (tmp_path / "held.json.bad").is_dir()

    async def burst() -> list[dict[str, Any]]:
        t = table()
        writer = held.HeldFile(tmp_path / held.FILE_NAME, t.held_entries)
        t.on_held = writer.changed
        commands = [t.new({"argv": ["true"], "label": str(i)}) for i in range(50)]
        for cmd in commands:
            t.hold(cmd)
        t.forget(commands[0])
        await writer.flushed()
        return held.read(writer.path)

    assert [e["body"]["label"] for e in asyncio.run(burst())] == [str(i) for i in range(1, 50)]
