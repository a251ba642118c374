"""Measurement integrity on a real GPU (docs/integrity.md): the PyTorch and
Triton catalogue of timing hacks (tests/gpu/integrity_candidates; what each
does is in its docstring, what it must raise in tests/integrity_catalogue.py),
each a real tenant of a real runtime (policy krex) on GPU 0 timing inside a
region, each raising exactly its flag (a replaced framework timer included); and
honest candidates (eager torch, cuBLAS, Triton, a CUDA graph on the timed
stream, fork-joins across streams, with or without work on the timed
stream) raising none. Each region's `timing` must be the driver's elapsed
times of its windows, exactly what the candidate read through torch.

The candidates run together, as one batch of `krex run --json` commands under
one runtime (their regions take turns on the GPU); each test checks one
candidate's records, and a failure prints its records, its own output and
its stderr. Skipped without a GPU (marker `gpu`); a candidate whose torch or
Triton is not installed is skipped. The same scripts run on the simulator in
CI: tests/integrity/test_integrity_catalogue.py.

    python -m pytest -q -s tests/gpu/test_gpu_integrity.py
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from integrity_catalogue import EXPECTED, Outcome, check, missing, run_all
from runtime_helpers import module_runtime, regions_config

from krex_runtime.testing.local_runtime import Runtime

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    yield from module_runtime(tmp_path_factory.mktemp("integrity") / "rt", policy="krex", sim=0, slots=16,
                              extra_config=regions_config())


@pytest.fixture(scope="module")
def outcomes(gpu_rt: Runtime) -> dict[str, Outcome]:
    return run_all(gpu_rt, [n for n in EXPECTED if missing(n) is None], "--gpu", "0")


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.skipif(missing(n) is not None, reason=f"{missing(n)} not installed"))
    for n in EXPECTED
])
def test_candidate_raises_exactly_its_flags(name: str, outcomes: dict[str, Outcome]) -> None:
    check(name, outcomes[name])
