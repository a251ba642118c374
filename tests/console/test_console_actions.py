"""The console's actions come from the runtime's verb table: what each sends,
what its dialog explains, how long it waits, and whether its key is hidden
in read-only mode and in replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from krex_console import actions
from krex_runtime.wire.protocol import verbs
from krex_runtime.wire.trace.jsonl import read_trace, replay

TRACE = Path(__file__).parent / "data" / "small-trace.jsonl"


def test_changing_keys_are_those_that_send_a_changing_verb() -> None:
    assert {"lease", "release", "recycle", "toggle_admission", "kill"} == actions.CHANGING_ACTIONS
    for name, sent in actions.ACTION_VERBS.items():
        assert (name in actions.CHANGING_ACTIONS) == any(verb.changes_state for verb in sent)
        assert all(verb.confirm for verb in sent), f"{name}: a verb the console offers has no confirm text"


def test_each_action_is_its_verb() -> None:
    state = replay(read_trace(TRACE))
    gpu, command = state.gpus[1], next(iter(state.commands.values()))
    planned = {
        "lease": actions.lease(gpu), "release": actions.release(gpu), "recycle": actions.recycle(gpu),
        "toggle_admission": actions.toggle_admission(gpu), "kill": actions.kill(command),
    }
    for name, plan in planned.items():
        verb = verbs.VERBS[plan.request]
        assert verb in actions.ACTION_VERBS[name]
        assert plan.detail.startswith(verb.confirm) and plan.wait_s == verb.wait_s
        verb.body(**plan.body)
    assert planned["lease"].wait_s == verbs.LEASE_WAIT_S
    assert planned["kill"].detail == f"Ends its whole process tree. State now: {command.state}."
    assert planned["kill"].question == f"Kill command {command.id} ({command.label})?"


def test_a_body_the_verb_does_not_take_is_refused_before_sending() -> None:
    with pytest.raises(TypeError):
        actions.plan(verbs.RELEASE, "Release", "GPU 0", {"gpu": 0, "now": True})
