"""Multiple kernels per forward: per-sample mean and variance by torch.var_mean over the whole GPU, then a load_inline CUDA kernel that normalises and applies the affine weight and bias. Expected: correct, faster (the reference's LayerNorm gives each of the 16 four-million-element rows one block), honest."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

// y[b, j] = (x[b, j] - mean[b]) * rstd[b] * w[j] + bias[j]; rows of `inner` elements.
__global__ void ln_apply_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                                const float* __restrict__ rstd, const float* __restrict__ w,
                                const float* __restrict__ bias, float* __restrict__ y,
                                int64_t n, int64_t inner) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t b = i / inner;
        int64_t j = i - b * inner;
        y[i] = (x[i] - mean[b]) * rstd[b] * w[j] + bias[j];
    }
}

cudaError_t launch_ln_apply(const float* x, const float* mean, const float* rstd, const float* w,
                            const float* bias, float* y, int64_t n, int64_t inner, cudaStream_t stream) {
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    ln_apply_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(x, mean, rstd, w, bias, y, n, inner);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_ln_apply(const float* x, const float* mean, const float* rstd, const float* w,
                            const float* bias, float* y, int64_t n, int64_t inner, cudaStream_t stream);

torch::Tensor ln_apply(torch::Tensor x, torch::Tensor mean, torch::Tensor rstd, torch::Tensor w, torch::Tensor bias) {
    for (const auto& t : {x, mean, rstd, w, bias}) {
        TORCH_CHECK(t.is_cuda(), "every argument must be a CUDA tensor");
        TORCH_CHECK(t.scalar_type() == torch::kFloat32, "every argument must be float32");
    }
    auto xc = x.contiguous();
    auto mc = mean.contiguous(), rc = rstd.contiguous(), wc = w.contiguous(), bc = bias.contiguous();
    const int64_t inner = wc.numel();
    TORCH_CHECK(bc.numel() == inner && inner > 0 && xc.numel() % inner == 0, "weight/bias do not match x");
    TORCH_CHECK(mc.numel() == xc.numel() / inner && rc.numel() == mc.numel(), "one mean and rstd per row");
    auto y = torch::empty_like(xc);
    cudaError_t err = launch_ln_apply(xc.data_ptr<float>(), mc.data_ptr<float>(), rc.data_ptr<float>(),
                                      wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(),
                                      xc.numel(), inner, at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "ln_apply launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

_ext = load_inline(name="krex_eval_l1_40_v1", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["ln_apply"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)  # holds weight and bias, initialised as the reference's

    def forward(self, x):
        inner = self.ln.weight.numel()
        rows = x.reshape(-1, inner)
        var, mean = torch.var_mean(rows, dim=1, correction=0)
        rstd = torch.rsqrt(var + self.ln.eps)
        return _ext.ln_apply(x, mean, rstd, self.ln.weight, self.ln.bias)
