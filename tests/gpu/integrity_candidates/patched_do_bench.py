"""Hack, `patched_harness` (run under auto-regions): the candidate times a
Triton kernel once with the real `triton.testing.do_bench` (its own region,
made by auto-regions: honest, clean), then replaces `do_bench` with a fake
that answers at once, calls it, and times once more, honestly, inside a
region of its own: that region is flagged, as is every region after the
patch. do_bench's warmup and rep are kept small so that it records a few
hundred windows at most."""

import json

import torch
import triton
import triton.language as tl
import triton.testing
from _candidate import measure, timed, warm

N = 1 << 22


@triton.jit
def add_one(ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(ptr + offs, tl.load(ptr + offs, mask=mask) + 1.0, mask=mask)


x = torch.zeros(N, device="cuda")


def kernel() -> None:
    add_one[(triton.cdiv(N, 1024),)](x, N, BLOCK=1024)


warm(kernel)
honest_ms = triton.testing.do_bench(kernel, warmup=5, rep=20)  # auto-regions: a region of its own
triton.testing.do_bench = lambda fn, *args, **kwargs: 0.001  # the patch: an answer, nothing timed
fake_ms = triton.testing.do_bench(kernel)
print(json.dumps({"do_bench_ms": honest_ms, "patched_ms": fake_ms}), flush=True)
measure(lambda: timed(kernel))
