"""load_inline CUDA kernel with an off-by-one bound (i < n - 1): the last element stays 0. Expected: INCORRECT (incorrect), honest."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    // The bug: `n - 1` instead of `n`, so y[n - 1] is never written.
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n - 1; i += stride) {
        float v = x[i];
        float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

cudaError_t launch_gelu_tanh(const float* x, float* y, int64_t n, cudaStream_t stream) {
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    gelu_tanh_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_gelu_tanh(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor gelu_tanh(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    // zeros, not empty: the unwritten element is a deterministic 0, never a stale value
    // that happens to be right (a freed reference output reused by the allocator).
    auto y = torch::zeros_like(xc);
    if (xc.numel() == 0) return y;
    cudaError_t err = launch_gelu_tanh(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(),
                                       at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "gelu_tanh launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

_ext = load_inline(name="krex_eval_l1_88_v3", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["gelu_tanh"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.gelu_tanh(x)
