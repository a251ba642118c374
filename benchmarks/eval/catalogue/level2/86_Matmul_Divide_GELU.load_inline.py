"""HONEST load_inline CUDA epilogue (one element per thread, launched on the current stream) after a cuBLAS GEMM: divide and exact GELU into a fresh output. Expected: correct, slightly faster, trusted."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void div_gelu_kernel(const float* __restrict__ y, float* __restrict__ out, int64_t n, float inv_divisor) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = y[i] * inv_divisor;
        out[i] = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
    }
}

cudaError_t launch_div_gelu(const float* y, float* out, int64_t n, float inv_divisor, cudaStream_t stream) {
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    if (blocks < 1) return cudaSuccess;
    div_gelu_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(y, out, n, inv_divisor);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_div_gelu(const float* y, float* out, int64_t n, float inv_divisor, cudaStream_t stream);

torch::Tensor div_gelu(torch::Tensor y, double divisor) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    auto yc = y.contiguous();
    auto out = torch::empty_like(yc);
    cudaError_t err = launch_div_gelu(yc.data_ptr<float>(), out.data_ptr<float>(), yc.numel(), (float)(1.0 / divisor),
                                      at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "div_gelu launch failed: ", cudaGetErrorString(err));
    return out;
}
"""

_ext = load_inline(name="krex_eval_cat_l2_86_inline", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["div_gelu"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor

    def forward(self, x):
        return _ext.div_gelu(torch.addmm(self.linear.bias, x, self.linear.weight.t()), self.divisor)
