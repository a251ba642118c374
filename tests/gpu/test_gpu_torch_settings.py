"""torch's precision flags in a context process (tenant/framework_state.py
`put_back`), with the real torch: after a command changes one, the check
either puts every reading back as it was and keeps the process, or retires
it; it never keeps a process whose readings differ. Each change runs in a
fresh Python process, as a pooled command's process starts from its
baseline. Marked `gpu` so that it runs with the GPU suite, where torch is;
it needs no GPU.

    python -m pytest -m gpu tests/gpu/test_gpu_torch_settings.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from runtime_helpers import REPO

pytestmark = pytest.mark.gpu

PROBE = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
from krex_runtime.tenant.process_state import ProcessState


def readings():
    out = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    for mod, label in ((torch.backends.cuda.matmul, "matmul"), (torch.backends.cudnn, "cudnn")):
        for name in ("allow_tf32", "fp32_precision"):
            try:
                out[f"{label}.{name}"] = getattr(mod, name)
            except Exception as exc:  # torch refuses to read a legacy flag after mixed APIs
                out[f"{label}.{name}"] = f"unreadable: {type(exc).__name__}"
    return out


def main(change):
    state = ProcessState()
    before = readings()
    exec(change, {"torch": torch})
    verdict = state.check()
    print(json.dumps({"verdict": verdict, "same": readings() == before}))


main(sys.argv[1])
"""

# Put back on torch 2.11 (H200: the isolation probe, and krex bench's fp32
# candidates, which set allow_tf32 = False where it already was).
PUT_BACK = ["torch.backends.cuda.matmul.allow_tf32 = False", "torch.backends.cuda.matmul.fp32_precision = 'tf32'"]
# Put back or retired, by torch version; never kept with a reading changed.
EITHER = [
    "torch.backends.cuda.matmul.allow_tf32 = True",
    "torch.backends.cuda.matmul.fp32_precision = 'ieee'",
    "torch.set_float32_matmul_precision('high')",
    "torch.set_float32_matmul_precision('medium')",
    "torch.backends.cudnn.allow_tf32 = False",
    "torch.backends.cudnn.fp32_precision = 'ieee'",
]


def verdict(change: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PROBE, change], capture_output=True, text=True, env=env, timeout=120)
    if "No module named 'torch'" in done.stderr:
        pytest.skip("no torch")
    if done.returncode and "AttributeError" in done.stderr:
        pytest.skip(f"{change}: not in this torch")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("change", PUT_BACK + EITHER)
def test_a_precision_flag_is_put_back_or_the_process_retires(change: str) -> None:
    seen = verdict(change)
    if change in PUT_BACK:
        assert seen == {"verdict": "", "same": True}
    elif seen["verdict"] == "":
        assert seen["same"] is True, seen  # kept: every reading as at the baseline
    else:
        assert str(seen["verdict"]).startswith("state-changed: "), seen


def test_cudnn_benchmark_retires() -> None:
    assert verdict("torch.backends.cudnn.benchmark = True")["verdict"] == "state-changed: torch.backends.cudnn.benchmark"
