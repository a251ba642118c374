"""cuBLAS GEMM (torch.mm) then a load_inline CUDA epilogue: bias add and ReLU fused, in place, row-broadcast indexing. Expected: correct, slightly faster, honest."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void bias_relu_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n, int64_t cols) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = y[i] + bias[i % cols];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

cudaError_t launch_bias_relu(float* y, const float* bias, int64_t n, int64_t cols, cudaStream_t stream) {
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) return cudaSuccess;
    bias_relu_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(y, bias, n, cols);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_bias_relu(float* y, const float* bias, int64_t n, int64_t cols, cudaStream_t stream);

torch::Tensor bias_relu_(torch::Tensor y, torch::Tensor bias) {
    TORCH_CHECK(y.is_cuda() && bias.is_cuda(), "y and bias must be CUDA tensors");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32, "float32 only");
    TORCH_CHECK(y.dim() == 2 && y.is_contiguous(), "y must be a contiguous matrix (it is written in place)");
    TORCH_CHECK(bias.numel() == y.size(1), "one bias per column");
    auto b = bias.contiguous();
    cudaError_t err = launch_bias_relu(y.data_ptr<float>(), b.data_ptr<float>(), y.numel(), y.size(1),
                                       at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "bias_relu launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

_ext = load_inline(name="krex_eval_l2_76_v1", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["bias_relu_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return _ext.bias_relu_(torch.mm(x, self.gemm.weight.t()), self.bias)
