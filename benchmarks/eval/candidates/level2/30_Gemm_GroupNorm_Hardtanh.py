"""cuBLAS GEMM (torch.addmm) then one Triton kernel per (row, group): GroupNorm statistics, normalisation, affine and Hardtanh fused. Expected: correct, faster (three passes become one), honest."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gn_hardtanh_kernel(y_ptr, w_ptr, b_ptr, out_ptr, C, group_size, eps, lo, hi, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    g = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    mask = offs < group_size
    cols = g * group_size + offs
    v = tl.load(y_ptr + row * C + cols, mask=mask, other=0.0)
    mean = tl.sum(v, axis=0) / group_size
    d = tl.where(mask, v - mean, 0.0)
    var = tl.sum(d * d, axis=0) / group_size  # biased, as GroupNorm's
    o = d / tl.sqrt(var + eps) * tl.load(w_ptr + cols, mask=mask, other=1.0) + tl.load(b_ptr + cols, mask=mask, other=0.0)
    o = tl.minimum(tl.maximum(o, lo), hi)
    tl.store(out_ptr + row * C + cols, o, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, num_groups, hardtanh_min, hardtanh_max):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)  # holds the affine weight and bias, and eps
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max

    def forward(self, x):
        y = torch.addmm(self.gemm.bias, x, self.gemm.weight.t())
        rows, C = y.shape
        groups = self.group_norm.num_groups
        group_size = C // groups
        out = torch.empty_like(y)
        _gn_hardtanh_kernel[(rows, groups)](y, self.group_norm.weight, self.group_norm.bias, out, C, group_size,
                                            self.group_norm.eps, float(self.hardtanh_min), float(self.hardtanh_max),
                                            BLOCK=triton.next_power_of_2(group_size))
        return out
