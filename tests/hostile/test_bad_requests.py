"""Requests a client can send that no CLI would, against a real runtime on two
simulated GPUs: each is refused with `bad_request` naming what is wrong,
never run somewhere else, never an `internal` error.

- a submit naming GPUs the node does not have (`gpus: [99]`, `[-1]`, `[3]`)
  once ran on GPU 0 (issue 47, F6);
- `logs` from an offset past any file (1e20) once answered `internal error`
  (F13).
"""

from __future__ import annotations

from typing import Any

import pytest

from krex_runtime.api import RequestFailed


def _refusal(rt: Any, verb: str, body: dict[str, Any]) -> RequestFailed:
    with rt.client() as c, pytest.raises(RequestFailed) as caught:
        c.call(verb, body)
    return caught.value


def test_a_submit_naming_gpus_the_node_lacks_is_a_bad_request(make_runtime: Any) -> None:
    rt = make_runtime(sim=2)
    for gpus in ([99], [-1], [3], [0, 3], [-1, 0]):
        refused = _refusal(rt, "submit", {"argv": ["true"], "gpus": gpus})
        assert refused.code == "bad_request", (gpus, refused.code, refused.reason)
        assert "it has: 0, 1" in refused.reason, (gpus, refused.reason)
    with rt.client() as c:
        assert c.call("ls")["commands"] == []  # nothing was queued, nothing ran
    # One GPU named in `gpus` is that GPU, as `gpu` names it.
    with rt.client() as c:
        command_id = c.call("submit", {"argv": ["true"], "gpus": [1]})["id"]
        done = c.call("wait", {"id": command_id, "attach": False}, timeout=60)
        assert done.get("gpu") == 1, done


def test_logs_from_an_offset_past_any_file_is_a_bad_request(make_runtime: Any) -> None:
    rt = make_runtime(sim=1)
    with rt.client() as c:
        command_id = c.call("submit", {"argv": ["echo", "hello"]})["id"]
        c.call("wait", {"id": command_id, "attach": False}, timeout=60)
    for offsets in ({"stdout": 10**20}, {"stdout": -1}, {"stderr": 2**63}):
        refused = _refusal(rt, "logs", {"id": command_id, "offsets": offsets})
        assert refused.code == "bad_request", (offsets, refused.code, refused.reason)
        assert "offsets" in refused.reason, refused.reason
    refused = _refusal(rt, "logs", {"id": command_id, "tail": -3})
    assert refused.code == "bad_request" and "tail" in refused.reason, refused.reason
    with rt.client() as c:  # a sane offset still reads
        assert c.call("logs", {"id": command_id, "offsets": {"stdout": 0}})["output"]["stdout"]["data"] == "hello\n"
