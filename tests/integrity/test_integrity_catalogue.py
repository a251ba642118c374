"""The PyTorch/Triton catalogue of timing hacks (tests/gpu/integrity_candidates)
on the simulator: the same candidate scripts as tests/gpu/test_gpu_integrity.py,
each a tenant of a runtime on a simulated GPU, with the stand-ins of
tests/tenants/torch_on_sim for torch and Triton (they make the driver calls
torch and Triton make: streams, events, waits, graphs, one launch per
operator). Every hack raises exactly its flag, every honest candidate none.
What real torch does on a real GPU is the GPU suite's to check."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from integrity_catalogue import EXPECTED, Outcome, check, run_all
from runtime_helpers import TENANTS, module_runtime, regions_config


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[dict[str, Outcome]]:
    for rt in module_runtime(tmp_path_factory.mktemp("catalogue") / "rt", policy="krex", sim=1, slots=8,
                             extra_config=regions_config()):
        stand_ins = os.pathsep.join(p for p in (str(TENANTS / "torch_on_sim"), rt.env.get("PYTHONPATH", "")) if p)
        yield run_all(rt, list(EXPECTED), env={"PYTHONPATH": stand_ins})


@pytest.mark.parametrize("name", list(EXPECTED))
def test_candidate_raises_exactly_its_flags(name: str, outcomes: dict[str, Outcome]) -> None:
    check(name, outcomes[name])
