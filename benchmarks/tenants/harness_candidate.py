"""An unmodified candidate: times a bf16 matmul with a well-known harness and
never mentions KREX. argv: KIND (do_bench | timer) [N]. Prints one JSON line
with the median time in ms. Under `krex run --auto-region` the harness call
runs in a region (krex_runtime/tenant/auto_region.py); natively it is plain."""

import json
import sys

import torch

kind = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)


def fn() -> None:
    a @ b


if kind == "do_bench":
    from triton.testing import do_bench

    ms = do_bench(fn, warmup=25, rep=200, return_mode="median")
elif kind == "timer":
    from torch.utils.benchmark import Timer

    ms = Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=1.0).median * 1e3
else:
    raise SystemExit(f"unknown kind {kind!r}")


def sm_clock_mhz() -> int | None:
    """The SM clock right after the measurement (NVML), so a reader can tell a
    power-state change from interference; None where NVML is not there."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device()),
                                             pynvml.NVML_CLOCK_SM)
    except Exception:
        return None


print(json.dumps({"kind": kind, "ms": ms, "sm_clock_mhz": sm_clock_mhz()}))
