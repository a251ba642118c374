"""libkrex.so on a real NVIDIA GPU: it sees every launch of the common stacks,
and each of them parks at a closed gate and finishes correctly after.

Programs: PyTorch eager ops, a cuBLAS matmul, a CUDA graph replay, a Triton
kernel, a CuPy RawKernel, and a CUDA C++ program built with nvcc (static
cudart). Each runs as its own process with the library preloaded and a gate
created here (krex_runtime/regions/gate/core.py plays the runtime):

  ready -> close the gate, wait until quiescent, drain -> "go" -> the program's
  first submission parks (parked >= 1, no calls for a while) -> reopen -> it
  finishes; its result is checked and the library's counts are compared with
  what the program did (exactly N launches where the program controls them).

Self-contained (no conftest fixtures), so it also runs with --noconftest on a
machine that lacks the runtime's other dependencies.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runtime_helpers import Heartbeat

from krex_runtime.regions.gate import core as gate
from krex_runtime.testing.local_runtime import wait_until

REPO = Path(__file__).resolve().parents[2]


def _has_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU")]

TENANT, HOLDER, N = 1, 99, 200

PRELUDE = r"""
import json, os, sys
from krex_runtime.regions.gate import core as kg
from krex_runtime.regions.gate import header_layout as gate_layout
G = kg.Gate.attach(os.environ["KREX_GATE_PATH"], writable=False)  # as a tenant may
def counts():
    for e in G.processes():
        if e.pid == os.getpid():
            return dict(e.calls)
    return {c: 0 for c in gate_layout.CALL_CLASSES}
N = int(sys.argv[1])
"""

EPILOGUE = r"""
before = counts()
print("ready", flush=True)
sys.stdin.readline()
work()
sync()
after = counts()
print(json.dumps({"delta": {k: after[k] - before[k] for k in after}, "ok": bool(check())}), flush=True)
"""

PROGRAMS = {
    "torch_eager": r"""
import torch
x = torch.zeros(1 << 20, device="cuda")
x.add_(1.0); x.zero_()
sync = torch.cuda.synchronize
sync()
def work():
    for _ in range(N):
        x.add_(1.0)
def check():
    return bool((x == N).all())
""",
    "cublas_matmul": r"""
import torch
a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
ref = (a @ b).float()
sync = torch.cuda.synchronize
sync()
out = {}
def work():
    for _ in range(N):
        out["c"] = a @ b
def check():
    return bool(torch.allclose(out["c"].float(), ref, rtol=1e-2, atol=1e-1))
""",
    "cuda_graph": r"""
import torch
x = torch.zeros(1 << 16, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        x.add_(1.0)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    for _ in range(10):
        x.add_(1.0)
x.zero_()
sync = torch.cuda.synchronize
sync()
def work():
    for _ in range(N):
        g.replay()
def check():
    return bool((x == 10 * N).all())
""",
    "triton": r"""
import torch, triton, triton.language as tl
@triton.jit
def add_one(ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(ptr + offs, tl.load(ptr + offs, mask=mask) + 1.0, mask=mask)
x = torch.zeros(4096, device="cuda")
grid = (4096 // 1024,)
add_one[grid](x, 4096, BLOCK=1024)
x.zero_()
sync = torch.cuda.synchronize
sync()
def work():
    for _ in range(N):
        add_one[grid](x, 4096, BLOCK=1024)
def check():
    return bool((x == N).all())
""",
    "cupy_rawkernel": r"""
import cupy as cp
inc = cp.RawKernel(r'''
extern "C" __global__ void inc(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}''', "inc")
x = cp.zeros(4096, dtype=cp.float32)
inc((4,), (1024,), (x, cp.int32(4096)))
x.fill(0)
def sync():
    cp.cuda.Device().synchronize()
sync()
def work():
    for _ in range(N):
        inc((4,), (1024,), (x, cp.int32(4096)))
def check():
    return bool((x == N).all())
""",
}

# What the library must have seen during work(): (class, exact count or None for ">= N").
EXPECT = {
    "torch_eager": ("launch", N),
    "cublas_matmul": ("launch", None),
    "cuda_graph": ("graph", N),
    "triton": ("launch", N),
    "cupy_rawkernel": ("launch", N),
}
NEEDS = {"torch_eager": "torch", "cublas_matmul": "torch", "cuda_graph": "torch", "triton": "triton",
         "cupy_rawkernel": "cupy"}


@pytest.fixture(scope="module")
def libkrex() -> Path:
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), "build/libkrex.so"], check=True)
    return REPO / "native" / "build" / "libkrex.so"


@pytest.fixture(scope="module")
def counted_kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc")
    out = tmp_path_factory.mktemp("nvcc") / "counted_kernels"
    subprocess.run([nvcc, "-O2", "-cudart", "static", "-o", str(out), str(Path(__file__).parent / "counted_kernels.cu")],
                   check=True)
    return out


def entry_of(g: gate.Gate, pid: int) -> gate.ProcEntry | None:
    return next((e for e in g.processes() if e.pid == pid), None)


def run_gated(argv: list[str], libkrex: Path, tmp_path: Path) -> tuple[str, list[dict], str]:
    """Run a program through close -> go -> parked -> reopen; returns (last line, stats, stderr)."""
    g = gate.Gate.create(tmp_path / "gpu0.gate", max_procs=64)
    g.add_tenant(TENANT)
    beat = Heartbeat(g)
    stats_path, err_path = tmp_path / "stats.jsonl", tmp_path / "stderr.txt"
    env = dict(os.environ, LD_PRELOAD=str(libkrex), KREX_GATE_PATH=str(g.path), KREX_TENANT_ID=str(TENANT),
               KREX_INTERCEPT_STATS=str(stats_path), PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    with err_path.open("w") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"{line!r}\n{err_path.read_text()[-4000:]}"
        g.close_gate(HOLDER)
        assert g.wait_quiescent(HOLDER, 60.0) == []
        outcomes = g.drain(HOLDER, 60.0)
        assert all(o.result == "ok" for o in outcomes), outcomes
        proc.stdin.write("go\n")
        proc.stdin.flush()
        def parked() -> bool:
            e = entry_of(g, proc.pid)
            return e is not None and e.parked >= 1

        wait_until(parked, 60, "the program parks", interval_s=0.01)
        e = entry_of(g, proc.pid)
        assert e.in_call == 0
        before = e.calls_total
        time.sleep(1.0)
        e = entry_of(g, proc.pid)
        assert e.calls_total == before and e.parked >= 1, "made progress through a closed gate"
        g.open_gate()
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"exit {proc.returncode}\n{err_path.read_text()[-4000:]}"
    finally:
        beat.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        g.detach()
    stats = [json.loads(s) for s in stats_path.read_text().splitlines()] if stats_path.exists() else []
    return out.strip().splitlines()[-1], stats, err_path.read_text()


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_framework_launches_seen_and_parked(program: str, libkrex: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec(NEEDS[program]) is None:
        pytest.skip(f"{NEEDS[program]} not installed")
    script = tmp_path / f"krex_program_{program}.py"  # not "triton.py": it would shadow the package
    script.write_text(PRELUDE + PROGRAMS[program] + EPILOGUE)
    last, stats, err = run_gated([sys.executable, str(script), str(N)], libkrex, tmp_path)
    result = json.loads(last)
    assert result["ok"], f"wrong result after the gate reopened: {result}"
    klass, exact = EXPECT[program]
    seen = result["delta"][klass]
    print(f"{program}: delta {result['delta']}; exit stats {stats}")
    if exact is None:
        assert seen >= N, result
    else:
        assert seen == exact, result
    mine = [s for s in stats if s["tenant"] == str(TENANT)]
    assert mine and all(s["events"]["unmapped"] == 0 for s in mine), (stats, err[-2000:])


def test_nvcc_static_cudart_program(libkrex: Path, counted_kernels: Path, tmp_path: Path) -> None:
    last, stats, err = run_gated([str(counted_kernels), str(N), "wait"], libkrex, tmp_path)
    assert last == f"done {N} ok", err[-2000:]
    assert len(stats) == 1, stats
    print(f"nvcc program: exit stats {stats[0]}")
    assert stats[0]["classes"]["launch"] == N, stats
    assert stats[0]["calls"].get("cuLaunchKernel", 0) + stats[0]["calls"].get("cuLaunchKernelEx", 0) \
        + stats[0]["calls"].get("cuLaunchKernel_ptsz", 0) + stats[0]["calls"].get("cuLaunchKernelEx_ptsz", 0) == N
    assert stats[0]["events"]["unmapped"] == 0
