"""HONEST load_inline CUDA kernel (one fused pass, launched on the current stream). Expected: correct, faster, trusted."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

cudaError_t launch_gelu_tanh(const float* x, float* y, int64_t n, cudaStream_t stream) {
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;  // one element per thread: 262144 blocks at 8192x8192
    if (blocks < 1) return cudaSuccess;
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
    auto y = torch::empty_like(xc);
    cudaError_t err = launch_gelu_tanh(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(),
                                       at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "gelu_tanh launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

_ext = load_inline(name="krex_eval_cat_l1_88_inline", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["gelu_tanh"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.gelu_tanh(x)
