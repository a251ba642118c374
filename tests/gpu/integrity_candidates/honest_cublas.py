"""Honest, clean: cuBLAS and cuBLASLt through torch on the timed stream, with
their workspaces and whatever kernels (split-K, reductions) they pick: a
large bf16 matmul, an fp32 one, an addmm with a bias (a Lt epilogue) and a
batched fp16 matmul."""

import torch
from _candidate import measure, timed, warm

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
f = torch.randn(2048, 2048, device="cuda")
g = torch.randn(2048, 2048, device="cuda")
bias = torch.randn(2048, device="cuda")
p = torch.randn(64, 256, 512, device="cuda", dtype=torch.float16)
q = torch.randn(64, 512, 256, device="cuda", dtype=torch.float16)


def work() -> None:
    torch.mm(a, b, out=c)
    torch.mm(f, g)
    torch.addmm(bias, f, g)
    torch.bmm(p, q)


warm(work)
measure(lambda: timed(work))
