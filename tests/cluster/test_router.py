"""The router alone: where a command goes by its needs and the nodes' load
(krex_cluster/router.py is pure; no Ray, no runtime)."""

from __future__ import annotations

import pytest

from krex_cluster.router import GpuView, Needs, NodeView, NoPlacement, place, unmet


def gpus(n: int = 2, name: str = "KREX Simulated GPU", slots: int = 4, **kw: object) -> tuple[GpuView, ...]:
    return tuple(GpuView(index=i, name=name, slots=slots, **kw) for i in range(n))  # type: ignore[arg-type]


def node(name: str, alive: bool = True, **kw: object) -> NodeView:
    kw.setdefault("gpus", gpus())
    return NodeView(name=name, alive=alive, **kw)  # type: ignore[arg-type]


def test_the_least_loaded_node_by_its_share_of_slots() -> None:
    nodes = [node("a", outstanding=6), node("b", outstanding=2), node("c", outstanding=4)]
    assert place(Needs(), nodes) == "b"


def test_equal_nodes_are_chosen_by_name() -> None:
    assert place(Needs(), [node("b"), node("a")]) == "a"


def test_load_is_a_share_of_slots_not_a_count() -> None:
    big = node("big", gpus=gpus(4), outstanding=6)  # 6 of 16 slots
    small = node("small", gpus=gpus(1), outstanding=2)  # 2 of 4
    assert place(Needs(), [big, small]) == "big"


def test_the_node_own_queue_counts_when_larger_than_what_the_gateway_sent() -> None:
    busy = node("a", gpus=gpus(2, running=4, queued=3))
    assert place(Needs(), [busy, node("b", outstanding=1)]) == "b"


def test_shorter_region_queue_breaks_a_tie() -> None:
    assert place(Needs(), [node("a", gpus=gpus(region_queue=3)), node("b", gpus=gpus(region_queue=1))]) == "b"


def test_labels_must_all_be_carried() -> None:
    nodes = [node("a", labels={"zone": "a"}), node("b", labels={"zone": "b", "nvlink": "yes"}, outstanding=7)]
    assert place(Needs(node_labels={"zone": "b"}), nodes) == "b"
    assert "lacks nvlink=yes" in unmet(Needs(node_labels={"nvlink": "yes"}), nodes[0])


def test_gpu_model_by_name_case_insensitive() -> None:
    nodes = [node("a", gpus=gpus(name="NVIDIA A100")), node("h", gpus=gpus(name="NVIDIA H200"), outstanding=7)]
    assert place(Needs(gpu_model="h200"), nodes) == "h"


def test_a_warm_pool_wins_over_a_lighter_cold_node_for_pooled_commands() -> None:
    cold = node("cold", gpus=gpus(pool_size=2, pool_idle=0))
    warm = node("warm", gpus=gpus(pool_size=2, pool_idle=1), outstanding=3)
    assert place(Needs(mode="pooled"), [cold, warm]) == "warm"
    assert place(Needs(mode="process"), [cold, warm]) == "cold"  # nothing warm needed


def test_a_free_slot_wins_over_warmth() -> None:
    full_warm = node("warm", gpus=gpus(1, slots=2, pool_size=1, pool_idle=1), outstanding=2)
    cold = node("cold", gpus=gpus(1, slots=2, pool_size=1, pool_idle=0))
    assert place(Needs(mode="pooled"), [full_warm, cold]) == "cold"


def test_a_ready_zygote_for_forked_commands() -> None:
    nodes = [node("a", zygotes=True, gpus=gpus(zygote_ready=False)),
             node("b", zygotes=True, gpus=gpus(zygote_ready=True), outstanding=3)]
    assert place(Needs(mode="forked"), nodes) == "b"


def test_modes_a_node_does_not_offer() -> None:
    with pytest.raises(NoPlacement, match="no context pool") as err:
        place(Needs(mode="pooled"), [node("a")])
    assert not err.value.ever
    with pytest.raises(NoPlacement, match="no zygotes"):
        place(Needs(mode="forked"), [node("a")])


def test_needs_no_node_meets_are_refused_naming_each_node() -> None:
    with pytest.raises(NoPlacement) as err:
        place(Needs(node_labels={"zone": "c"}), [node("a", labels={"zone": "a"}), node("b")])
    assert not err.value.ever
    assert "a: lacks zone=c" in err.value.reason and "b: lacks zone=c" in err.value.reason


def test_a_capable_node_that_is_down_holds_the_command() -> None:
    nodes = [node("a", alive=False, reason="raylet gone", labels={"zone": "b"}), node("b")]
    with pytest.raises(NoPlacement, match=r"a: down \(raylet gone\)") as err:
        place(Needs(node_labels={"zone": "b"}), nodes)
    assert err.value.ever


def test_a_down_node_never_seen_could_still_meet_a_gpu_need() -> None:
    with pytest.raises(NoPlacement) as err:
        place(Needs(gpu_model="H200"), [node("a", alive=False, gpus=()), node("b")])
    assert err.value.ever


def test_paused_and_leased_gpus_take_nothing() -> None:
    paused = node("a", gpus=gpus(paused=True))
    assert place(Needs(), [paused, node("b", outstanding=7)]) == "b"
    with pytest.raises(NoPlacement, match="not admitting") as err:
        place(Needs(), [node("a", paused=True)])
    assert err.value.ever
    assert place(Needs(gpu=1), [node("a", gpus=(GpuView(0, "g", 4), GpuView(1, "g", 4, leased=True))),
                                node("b")]) == "b"


def test_an_explicit_gpu_index_the_node_lacks() -> None:
    assert "no GPU 5" in unmet(Needs(gpu=5), node("a"))


def test_no_nodes_at_all() -> None:
    with pytest.raises(NoPlacement, match="no nodes"):
        place(Needs(), [])
