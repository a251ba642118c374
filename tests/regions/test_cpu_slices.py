"""How a GPU's cores are split between its tenants and its region holder
(regions/entry/cpu_slices.py), with the machine's SMT siblings given: a reserved
core's siblings are kept from tenants too, unless that leaves them none."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from krex_runtime.regions.entry import cpu_slices


def gpus(*cores: list[int]) -> list[SimpleNamespace]:
    return [SimpleNamespace(index=i, cpus=c) for i, c in enumerate(cores)]


@pytest.fixture
def sixteen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))


def test_a_reserved_cores_sibling_is_kept_from_tenants(sixteen: None) -> None:
    pairs = lambda core: {core % 8, core % 8 + 8}  # noqa: E731 - 8 physical cores, threads i and i+8
    plan = cpu_slices.plan(gpus(list(range(16))), 1, {}, pairs)
    assert plan.reserved_cores(0) == (15,) and 7 not in plan.tenant_cores(0) and plan.note == ""
    assert plan.tenant_cores(0) == tuple(c for c in range(16) if c not in (7, 15))


def test_two_gpus_never_reserve_siblings_of_each_other(sixteen: None) -> None:
    pairs = lambda core: {core % 8, core % 8 + 8}  # noqa: E731
    plan = cpu_slices.plan(gpus(list(range(16)), list(range(16))), 1, {}, pairs)
    assert plan.reserved_cores(0) == (15,) and plan.reserved_cores(1) == (14,)
    assert not {6, 7, 14, 15} & set(plan.tenant_cores(0))


def test_without_smt_only_the_core_is_reserved(sixteen: None) -> None:
    plan = cpu_slices.plan(gpus(list(range(16))), 1, {}, lambda core: {core})
    assert plan.reserved_cores(0) == (15,) and plan.tenant_cores(0) == tuple(range(15))


def test_siblings_that_leave_tenants_nothing_stay_theirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    plan = cpu_slices.plan(gpus([0, 1]), 1, {}, lambda core: {0, 1})
    assert plan.reserved_cores(0) == (1,) and plan.tenant_cores(0) == (0,)
    assert "SMT siblings" in plan.note


def test_the_machines_own_siblings_include_the_core() -> None:
    assert 0 in cpu_slices.smt_siblings(0)
    assert cpu_slices.smt_siblings(10_000) == {10_000}  # sysfs does not say: the core alone
