"""No command observes what an earlier one changed, in pooled and forked mode.

A stand-in framework (tests/tenants/preloaded/stateful.py) is preloaded in
the context process and the zygote, with NumPy where it is installed. For
each kind of change (a module attribute, a monkeypatched function, a class
attribute, a setting behind a setter, builtins, the random generators) a
command makes it, and every command after it on the same GPU (50 and more
after each) sees a fresh process's state. In pooled mode the change retires
the context process with a reason that names it, except for the generators,
which are put back. One runtime, one GPU, a pool of one: every command of a
mode runs in the same context process or its replacement.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import PY, TENANTS, module_runtime, pool_and_zygote_ready, trace_events

from krex_runtime.api import Client
from krex_runtime.testing.local_runtime import Runtime, wait_until

try:
    import numpy  # noqa: F401

    HAVE_NUMPY = True
except ImportError:
    HAVE_NUMPY = False

PRELOAD = ["stateful", "pynvml"] + (["numpy"] if HAVE_NUMPY else [])

CHANGES = {
    "stateful.FACTOR": "import stateful\nstateful.FACTOR = 99.0\n",
    "stateful.activation": "import stateful\nstateful.activation = lambda x: -1.0\n",
    "stateful.Config.precision": "import stateful\nstateful.Config.precision = 'low'\n",
    "stateful.mode": "import stateful\nstateful.set_mode('fast')\n",
    "stateful.fast_math": "import stateful\nstateful.set_fast_math(True)\n",  # put back: no retirement
    "builtins.polluted": "import builtins\nbuiltins.polluted = True\n",
    "rng": (
        "import random, stateful\nstateful.manual_seed(7)\nstateful.rand()\nrandom.seed(1)\n"
        + ("import numpy\nnumpy.random.seed(1)\n" if HAVE_NUMPY else "")
    ),
}

PROBE = (
    "import builtins, json, random, sys, stateful\n"
    "seen = {\n"
    "    'factor': stateful.FACTOR,\n"
    "    'activation': stateful.activation(-2.0),\n"
    "    'precision': stateful.Config.precision,\n"
    "    'mode': stateful.get_mode(),\n"
    "    'fast_math': stateful.get_fast_math(),\n"
    "    'polluted': hasattr(builtins, 'polluted'),\n"
    "    'rand': stateful.rand(),\n"
    "    'random': random.getrandbits(64),\n"
    "}\n"
    "if 'numpy' in sys.modules:\n"
    "    seen['numpy'] = int(sys.modules['numpy'].random.randint(2**62))\n"
    "print(json.dumps(seen))\n"
)

FRESH = {"factor": 1.0, "activation": 0.0, "precision": "highest", "mode": "default", "fast_math": False,
         "polluted": False}
PUT_BACK = {"rng", "stateful.fast_math"}  # changes a context process undoes and keeps serving


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    pool = f"\n[pool]\nsize_per_gpu = 1\npreload = {json.dumps(PRELOAD)}\nzygote = true\nmax_commands = 1000\n"
    path = os.pathsep.join([str(TENANTS / "preloaded"), os.environ.get("PYTHONPATH", "")])
    for runtime in module_runtime(tmp_path_factory.mktemp("isolation") / "rt", sim=1, extra_config=pool,
                                  runtime_env={"PYTHONPATH": path}):
        wait_until(lambda rt=runtime: pool_and_zygote_ready(rt, 1), 60, "the pool and the zygote to be ready")
        yield runtime


def run(c: Client, mode: str, code: str) -> tuple[dict[str, Any], str]:
    body = {"argv": [PY, "-c", code], "mode": mode, "gpu": 0, "cwd": "/", "env": dict(os.environ)}
    result = c.call("wait", {"id": c.call("submit", body)["id"], "attach": False}, timeout=120)
    out = Path(result["stdout_path"]).read_text()
    assert result["state"] == "finished" and result["exit_code"] == 0, (result, Path(result["stderr_path"]).read_text())
    return result, out


@pytest.mark.parametrize("mode", ["pooled", "forked"])
def test_no_command_observes_an_earlier_change(rt: Runtime, mode: str) -> None:
    fresh_rand = random.Random(1234).random()  # the stand-in's first draw in a fresh process
    seen: list[dict[str, Any]] = []
    changers: list[str] = []
    with rt.client(timeout_s=120) as c:
        for i, code in enumerate(CHANGES.values()):
            result, _ = run(c, mode, code)
            changers.append(result["id"])
            last = i == len(CHANGES) - 1
            for _ in range(50 if last else 10):  # every change is followed by 50 commands or more
                _, out = run(c, mode, PROBE)
                seen.append(json.loads(out))
    for probe in seen:
        assert {k: probe[k] for k in FRESH} == FRESH, probe
        assert probe["rand"] == fresh_rand, probe
    # Seeded from the OS in each command, as in a fresh process: no two share a stream.
    assert len({p["random"] for p in seen}) == len(seen)
    if HAVE_NUMPY:
        assert len({p["numpy"] for p in seen}) == len(seen)
    if mode == "pooled":
        replaced = [e for e in trace_events(rt, "pool_worker_replaced") if e["cause"] == "state-changed"]
        reasons = [e["reason"] for e in replaced[-(len(CHANGES) - len(PUT_BACK)):]]
        assert reasons == [f"state-changed: {what}" for what in CHANGES if what not in PUT_BACK], reasons


# What pynvml.nvmlInit() binds in its module (the library's handle, the count
# of inits), done by hand: there is no NVML on a machine without a GPU.
USES_NVML = "import ctypes, pynvml\npynvml.nvmlLib = ctypes.CDLL(None)\npynvml._nvmlLib_refcount += 1\n"
NVML_PROBE = "import json, pynvml\nprint(json.dumps([pynvml.nvmlLib is None, pynvml._nvmlLib_refcount]))\n"


def test_a_command_that_used_nvml_leaves_its_context_process_serving(rt: Runtime) -> None:
    # A benchmark that reads the SM clock through pynvml must not cost the next
    # command a fresh context process.
    with rt.client(timeout_s=120) as c:
        replaced = len(trace_events(rt, "pool_worker_replaced"))
        first, _ = run(c, "pooled", USES_NVML)
        second, out = run(c, "pooled", NVML_PROBE)
    assert json.loads(out) == [True, 0]  # as a fresh process has them
    assert second["worker"] == first["worker"] is not None
    assert len(trace_events(rt, "pool_worker_replaced")) == replaced


def test_a_flag_read_on_every_use_is_put_back_and_the_process_keeps_serving(rt: Runtime) -> None:
    # Like a candidate that sets torch.backends.cuda.matmul.allow_tf32: the
    # next command sees the fresh value, from the same context process.
    with rt.client(timeout_s=120) as c:
        replaced = len(trace_events(rt, "pool_worker_replaced"))
        first, _ = run(c, "pooled", CHANGES["stateful.fast_math"])
        second, out = run(c, "pooled", PROBE)
    assert json.loads(out)["fast_math"] is False
    assert second["worker"] == first["worker"] is not None
    assert len(trace_events(rt, "pool_worker_replaced")) == replaced
