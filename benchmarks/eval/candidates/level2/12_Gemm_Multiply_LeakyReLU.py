"""cuBLAS GEMM (torch.addmm with the bias) then a load_inline CUDA epilogue that multiplies and applies LeakyReLU in place. Expected: correct, slightly faster (two elementwise passes become one), honest."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void scale_leaky_kernel(float* __restrict__ y, int64_t n, float multiplier, float slope) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = y[i] * multiplier;
        y[i] = v > 0.0f ? v : v * slope;
    }
}

cudaError_t launch_scale_leaky(float* y, int64_t n, float multiplier, float slope, cudaStream_t stream) {
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) return cudaSuccess;
    scale_leaky_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(y, n, multiplier, slope);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_scale_leaky(float* y, int64_t n, float multiplier, float slope, cudaStream_t stream);

torch::Tensor scale_leaky_(torch::Tensor y, double multiplier, double slope) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous (it is written in place)");
    cudaError_t err = launch_scale_leaky(y.data_ptr<float>(), y.numel(), (float)multiplier, (float)slope,
                                         at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "scale_leaky launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

_ext = load_inline(name="krex_eval_l2_12_v1", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["scale_leaky_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)  # created first, as the reference's: the same initial weights
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        y = torch.addmm(self.gemm.bias, x, self.gemm.weight.t())
        return _ext.scale_leaky_(y, self.multiplier, self.negative_slope)
