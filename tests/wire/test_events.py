"""The event registry (krex_runtime/wire/state/events.py): every event has a reducer,
the docs' table is the registry's, recorded traces have the classes' shapes,
and a trace's events are checked against their classes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from krex_runtime.wire.state import events
from krex_runtime.wire.state.event_check import SHAPES, EventError, UnknownEvent, check_event

ROOT = Path(__file__).resolve().parents[2]
RECORDED = [ROOT / "tests" / "console" / "data" / "small-trace.jsonl", ROOT / "tests" / "fuzz" / "data" /
            "rich-trace.jsonl"]
TABLE_START = "<!-- events table: printed by `python -m krex_runtime.wire.state.events --markdown`"
TABLE_END = "<!-- end of events table -->"


def test_every_event_is_a_documented_frozen_dataclass() -> None:
    # That each has a reducer: tests/fuzz/test_trace_fuzz.py.
    assert all(cls.type == name for name, cls in events.EVENTS.items())
    assert all(dataclasses.is_dataclass(cls) and cls.__doc__ for cls in events.EVENTS.values())
    assert all(cls.__dataclass_params__.frozen for cls in events.EVENTS.values())  # type: ignore[attr-defined]


def test_the_docs_table_is_the_registrys() -> None:
    doc = (ROOT / "docs" / "trace-format.md").read_text()
    start = doc.index("\n", doc.index(TABLE_START)) + 1
    assert doc[start:doc.index(TABLE_END)] == events.markdown_table(), (
        "docs/trace-format.md's event table is stale: "
        "paste `python -m krex_runtime.wire.state.events --markdown` between its markers"
    )
    printed = subprocess.run([sys.executable, "-m", "krex_runtime.wire.state.events", "--markdown"], cwd=ROOT,
                             capture_output=True, text=True, check=True)
    assert printed.stdout == events.markdown_table() and printed.stderr == ""


def test_importing_the_registry_prints_nothing() -> None:
    done = subprocess.run([sys.executable, "-c", "import krex_runtime.wire.state.events"], cwd=ROOT, capture_output=True,
                          text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_recorded_events_have_their_classes_shape(path: Path) -> None:
    """The keys a runtime wrote are its class's fields, in their order (older
    recordings may lack a field added since)."""
    for line in path.read_text().splitlines()[1:]:
        record = json.loads(line)
        cls = events.EVENTS[record["type"]]
        names = [f.name for f in dataclasses.fields(cls)]
        keys = [k for k in record if k not in ("seq", "t", "type")]
        assert keys == [n for n in names if n in record], record["type"]


def test_to_wire_gives_the_dict_emitters_always_wrote() -> None:
    queued = events.CommandQueued(id="a1-1", argv=["x"], gpu=0, timeout_s=None, label="", lease=False)
    assert events.to_wire(queued) == {
        "type": "command_queued", "id": "a1-1", "argv": ["x"], "gpu": 0, "timeout_s": None, "label": "", "lease": False,
    }  # the runtime's own commands have no `mode`; a process command's `worker` is absent, not null
    started = events.CommandStarted(id="a1-1", gpu=0, pid=7, tenant_id=3)
    assert list(events.to_wire(started)) == ["type", "id", "gpu", "pid", "tenant_id"]
    pooled = events.CommandStarted(id="a1-1", gpu=0, pid=7, tenant_id=3, worker="w1")
    assert events.to_wire(pooled)["worker"] == "w1"
    assert events.to_wire(events.RuntimeStopped()) == {"type": "runtime_stopped"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        started.gpu = 1  # type: ignore[misc]


def test_check_event_is_as_strict_as_the_reducer_needs() -> None:
    check_event({"type": "trace_gap", "t": 1.0, "lost": 2, "first_seq": 3, "last_seq": 4})  # no seq of its own
    check_event({"seq": 1, "t": 1.0, "type": "command_queued", "id": "a", "argv": [], "anything": {"else": 1}})
    with pytest.raises(UnknownEvent, match="unknown event type 'nope'"):
        check_event({"seq": 1, "t": 1.0, "type": "nope"})
    with pytest.raises(EventError, match="command_started: field 'pid' is missing"):
        check_event({"seq": 1, "t": 1.0, "type": "command_started", "id": "a", "gpu": 0, "tenant_id": None})
    with pytest.raises(EventError, match="field 'gpu' must be integer, not True"):
        check_event({"seq": 1, "t": 1.0, "type": "region_withdrawn", "gpu": True, "region": 1})
    with pytest.raises(EventError, match="command_queued: 'argv' must hold only strings"):
        check_event({"seq": 1, "t": 1.0, "type": "command_queued", "id": "a", "argv": [1]})
    with pytest.raises(EventError, match="region_granted: 'frozen' must hold only integers"):
        check_event({"seq": 1, "t": 1.0, "type": "region_granted", "gpu": 0, "region": 1, "tenant_id": 1,
                     "kind": "region", "frozen": ["x"]})
    assert SHAPES["region_released"] == {"gpu": (int,), "region": (int,), "reason": (str,), "verdict?": (str,),
                                         "verdict_reasons?": (list,), "share?": (str,), "exit_flags?": (list,),
                                         "integrity?": (dict, type(None)),
                                         "gpus?": (list, type(None))}  # optional: traces from before the certificate (or sets) lack them


def test_a_restart_in_a_trace_ends_what_the_earlier_run_left() -> None:
    """Replaying a restarted runtime's trace: the earlier run's queued and
    running commands ended with it, instead of showing as running forever."""
    from krex_runtime.wire.state import apply as node_state

    s = node_state.NodeState()
    seq = iter(range(1, 100))
    started = {"type": "runtime_started", "node": "n", "policy": "krex", "pid": 1,
               "gpus": [{"index": 0, "uuid": "u", "name": "g", "memory_total": 1, "simulated": True, "slots": 1}]}

    def apply(**e: object) -> None:
        node_state.apply(s, {"seq": next(seq), "t": 1.0, **e})

    apply(**started)
    apply(type="command_queued", id="a-1", argv=["x"], gpu=0)
    apply(type="command_queued", id="a-2", argv=["x"], gpu=0)
    apply(type="command_started", id="a-1", gpu=0, pid=2, tenant_id=1)
    apply(**{**started, "pid": 3})
    assert {c: (s.commands[c].state, s.commands[c].reason) for c in ("a-1", "a-2")} == {
        "a-1": ("failed", "the runtime restarted"), "a-2": ("failed", "the runtime restarted")}
    assert list(s.queue) == [] and s.gpus[0].running == [] and s.gpus[0].queued == 0


def test_an_id_a_restarted_runtime_gives_again_does_not_age_out_its_new_command() -> None:
    """A trace with a restart whose ids repeat the earlier run's: the earlier
    command's place in the ageing order must not drop the new, queued one."""
    from krex_runtime.wire.state import apply as node_state

    s = node_state.NodeState()
    seq = iter(range(1, 100))
    started = {"type": "runtime_started", "node": "n", "policy": "krex", "pid": 1, "keep_finished": 2,
               "gpus": [{"index": 0, "uuid": "u", "name": "g", "memory_total": 1, "simulated": True, "slots": 1}]}

    def apply(**e: object) -> None:
        node_state.apply(s, {"seq": next(seq), "t": 1.0, **e})

    apply(**started)
    apply(type="command_queued", id="a-1", argv=["x"], gpu=0)
    apply(type="command_finished", id="a-1", state="cancelled")
    apply(**{**started, "pid": 3})
    apply(type="command_queued", id="a-1", argv=["y"], gpu=0)  # the same id, a new command
    for n in (2, 3):
        apply(type="command_queued", id=f"a-{n}", argv=["x"], gpu=0)
        apply(type="command_finished", id=f"a-{n}", state="cancelled")
    assert s.commands["a-1"].state == "queued" and s.commands["a-1"].argv == ["y"]
    apply(type="command_started", id="a-1", gpu=0, pid=4, tenant_id=1)  # was: "never queued"
    assert s.commands["a-1"].state == "running"
