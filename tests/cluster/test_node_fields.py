"""What one runtime does with the cluster's fields (docs/protocol.md): `node`
on the operator verbs, `node_labels`, `gpu_model` and `retries` on submit."""

from __future__ import annotations

from typing import Any

import pytest

from krex_runtime.api import Client, RequestFailed
from krex_runtime.testing.local_runtime import Runtime


@pytest.fixture
def labelled(make_runtime: Any) -> Runtime:
    return make_runtime(policy="krex", runtime_extra='labels = { zone = "a", nvlink = "yes" }')


def test_a_node_name_other_than_its_own_is_not_found(labelled: Runtime) -> None:
    with Client(f"ipc://{labelled.run_dir / 'control.sock'}") as c:
        me = c.call("hello")["node"]
        assert c.call("hello")["labels"] == {"zone": "a", "nvlink": "yes"}
        assert c.call("status")["labels"] == {"zone": "a", "nvlink": "yes"}
        for verb, body in (("pause", {}), ("resume", {}), ("snapshot", {}), ("release", {"gpu": 0}),
                           ("recycle", {"gpu": 0}), ("lease", {"gpu": 0, "ttl_s": 1})):
            with pytest.raises(RequestFailed) as err:
                c.call(verb, {**body, "node": "elsewhere"})
            assert err.value.code == "not_found" and f"this runtime is node {me!r}" in err.value.reason, verb
        assert c.call("pause", {"node": me}) == {"paused": "node"}
        assert c.call("resume", {"node": None}) == {"resumed": "node"}
        assert set(c.call("snapshot", {"node": me})) == {"seq", "state"}


def test_needs_the_node_does_not_meet_are_refused(labelled: Runtime) -> None:
    with Client(f"ipc://{labelled.run_dir / 'control.sock'}") as c:
        with pytest.raises(RequestFailed, match=r"lacks the labels zone=b \(its labels: nvlink=yes, zone=a\)") as err:
            c.submit(["true"], node_labels={"zone": "b"})
        assert err.value.code == "refused"
        with pytest.raises(RequestFailed, match="no GPU of this node is a 'H200'"):
            c.submit(["true"], gpu_model="H200")
        with pytest.raises(RequestFailed, match="retries: must be between 0 and 100") as err:
            c.submit(["true"], retries=101)
        assert err.value.code == "bad_request"
        result = c.run(["true"], node_labels={"zone": "a"}, gpu_model="simulated", retries=2)
    assert result.ok


def test_krex_cluster_refuses_a_single_runtime(labelled: Runtime) -> None:
    done = labelled.krex("--cluster", f"ipc://{labelled.run_dir / 'control.sock'}", "status")
    assert done.returncode == 125 and "is a single runtime, not a cluster gateway" in done.stderr
