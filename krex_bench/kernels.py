"""The candidates' GPU code: Triton kernels and torch variants, and their references.

`build(candidate)` returns a Built: a function that runs the candidate once on
preallocated inputs, the output it writes (or returns), a reference in higher
precision and the relative-error tolerance. Imported only inside a command
(it needs torch and triton, and a GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from krex_bench.workload import Candidate


@dataclass
class Built:
    run: Callable[[], Any]  # one launch of the candidate; returns its output tensor
    reference: torch.Tensor
    tolerance: float  # relative L2 error allowed against the reference
    poison: Callable[[], None]  # fill the output with NaN, so an unwritten element fails the check


# --- matmul -----------------------------------------------------------------


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: programs that run together share rows of A in L2.
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        if IEEE:  # noqa: SIM108 (Triton compiles a constexpr branch as a block; a conditional expression is not its form)
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def _matmul(c: Candidate, dtype: torch.dtype, size: int, tolerance: float) -> Built:
    torch.backends.cuda.matmul.allow_tf32 = False  # IEEE float32: the reference's precision
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    out = torch.empty(size, size, device="cuda", dtype=dtype)
    ref_dtype = torch.float64 if dtype == torch.float32 else torch.float32
    reference = (a.to(ref_dtype) @ b.to(ref_dtype)).to(torch.float32)
    p = c.params
    if p["impl"] == "torch":
        def run() -> torch.Tensor:
            return torch.matmul(a, b, out=out)
    else:
        grid = (triton.cdiv(size, p["block_m"]) * triton.cdiv(size, p["block_n"]),)

        def run() -> torch.Tensor:
            matmul_kernel[grid](
                a, b, out, size, size, size,
                a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
                BLOCK_M=p["block_m"], BLOCK_N=p["block_n"], BLOCK_K=p["block_k"], GROUP_M=p["group_m"],
                IEEE=dtype == torch.float32, num_warps=p["warps"], num_stages=p["stages"],
            )  # fmt: skip
            return out
    return Built(run, reference, tolerance, lambda: out.fill_(float("nan")))


# --- softmax ----------------------------------------------------------------


@triton.jit
def softmax_row_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(in_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride + offs, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def softmax_online_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    # Two passes over the row in chunks: running max and rescaled sum, then
    # the normalised output. n_cols is a multiple of BLOCK (checked by build).
    row = tl.program_id(0)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(in_ptr + row * stride + start + tl.arange(0, BLOCK))
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * stride + offs)
        tl.store(out_ptr + row * stride + offs, tl.exp(x - row_max) / total)


def _softmax(c: Candidate) -> Built:
    rows, cols = 16384, 8192
    x = torch.randn(rows, cols, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    reference = torch.softmax(x.double(), dim=1).float()
    p = c.params
    if p["impl"] == "torch":
        def run() -> torch.Tensor:
            return torch.softmax(x, dim=1)
    elif p["impl"] == "torch_unfused":
        def run() -> torch.Tensor:
            e = (x - x.amax(dim=1, keepdim=True)).exp()
            return e / e.sum(dim=1, keepdim=True)
    elif p["impl"] == "triton_row":
        block = triton.next_power_of_2(cols)

        def run() -> torch.Tensor:
            softmax_row_kernel[(rows,)](out, x, x.stride(0), cols, BLOCK=block, num_warps=p["warps"])
            return out
    else:
        assert cols % p["block"] == 0, "the online kernel needs whole chunks"

        def run() -> torch.Tensor:
            softmax_online_kernel[(rows,)](out, x, x.stride(0), cols, BLOCK=p["block"], num_warps=p["warps"])
            return out
    return Built(run, reference, 1e-5, lambda: out.fill_(float("nan")))


# --- RMSNorm ----------------------------------------------------------------


@triton.jit
def rmsnorm_row_kernel(out_ptr, x_ptr, w_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    scale = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(out_ptr + row * stride + offs, (x * scale * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rmsnorm_rows_kernel(out_ptr, x_ptr, w_ptr, stride, n_rows, n_cols, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    offs = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (offs[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride + offs[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
    scale = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    y = x * scale[:, None] * w[None, :]
    tl.store(out_ptr + rows[:, None] * stride + offs[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def _rmsnorm(c: Candidate) -> Built:
    rows, cols, eps = 4096, 4096, 1e-6
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    xf = x.float()
    reference = xf * torch.rsqrt(xf.pow(2).mean(dim=1, keepdim=True) + eps) * w.float()
    p = c.params
    block = triton.next_power_of_2(cols)
    if p["impl"] == "torch_eager":
        def run() -> torch.Tensor:
            f = x.float()
            return (f * torch.rsqrt(f.pow(2).mean(dim=1, keepdim=True) + eps) * w.float()).to(torch.bfloat16)
    elif p["impl"] == "torch_fn":
        def run() -> torch.Tensor:
            return torch.nn.functional.rms_norm(x, (cols,), w, eps)
    elif p["impl"] == "triton_row":
        def run() -> torch.Tensor:
            rmsnorm_row_kernel[(rows,)](out, x, w, x.stride(0), cols, eps, BLOCK=block, num_warps=p["warps"])
            return out
    else:
        def run() -> torch.Tensor:
            grid = (triton.cdiv(rows, p["rows"]),)
            rmsnorm_rows_kernel[grid](
                out, x, w, x.stride(0), rows, cols, eps, ROWS=p["rows"], BLOCK=block, num_warps=p["warps"]
            )
            return out
    return Built(run, reference, 1e-2, lambda: out.fill_(float("nan")))


# --- GELU -------------------------------------------------------------------


@triton.jit
def gelu_kernel(out_ptr, x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    tanh = 2.0 * tl.sigmoid(2.0 * inner) - 1.0
    tl.store(out_ptr + offs, 0.5 * x * (1.0 + tanh), mask=mask)


def _gelu(c: Candidate) -> Built:
    n = 8 << 20
    x = torch.randn(n, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    reference = torch.nn.functional.gelu(x.double(), approximate="tanh").float()
    p = c.params
    if p["impl"] == "torch":
        def run() -> torch.Tensor:
            return torch.nn.functional.gelu(x, approximate="tanh")
    elif p["impl"] == "torch_unfused":
        def run() -> torch.Tensor:
            return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x.pow(3))))
    else:
        def run() -> torch.Tensor:
            gelu_kernel[(triton.cdiv(n, p["block"]),)](out, x, n, BLOCK=p["block"], num_warps=p["warps"])
            return out
    return Built(run, reference, 1e-5, lambda: out.fill_(float("nan")))


def build(c: Candidate) -> Built:
    if c.problem == "matmul_fp32":
        return _matmul(c, torch.float32, 8192, 1e-4)
    if c.problem == "matmul_fp32_4k":
        return _matmul(c, torch.float32, 4096, 1e-4)
    if c.problem == "matmul_bf16":
        return _matmul(c, torch.bfloat16, 8192, 2e-2)
    if c.problem == "softmax":
        return _softmax(c)
    if c.problem == "rmsnorm":
        return _rmsnorm(c)
    if c.problem == "gelu":
        return _gelu(c)
    raise KeyError(f"no GPU code for problem {c.problem!r}")


def relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    out = out.float()
    if not torch.isfinite(out).all():
        return float("inf")
    return float(torch.linalg.vector_norm(out - reference) / torch.linalg.vector_norm(reference))
