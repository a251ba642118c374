"""cuBLAS GEMM (torch.addmm) then a load_inline CUDA epilogue: divide and exact (erf) GELU fused in place. Expected: correct, slightly faster, honest."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void div_gelu_kernel(float* __restrict__ y, int64_t n, float inv_divisor) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = y[i] * inv_divisor;
        y[i] = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
    }
}

cudaError_t launch_div_gelu(float* y, int64_t n, float inv_divisor, cudaStream_t stream) {
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) return cudaSuccess;
    div_gelu_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(y, n, inv_divisor);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_div_gelu(float* y, int64_t n, float inv_divisor, cudaStream_t stream);

torch::Tensor div_gelu_(torch::Tensor y, double divisor) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous (it is written in place)");
    cudaError_t err = launch_div_gelu(y.data_ptr<float>(), y.numel(), (float)(1.0 / divisor),
                                      at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "div_gelu launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

_ext = load_inline(name="krex_eval_l2_86_v1", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["div_gelu_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x):
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        return _ext.div_gelu_(y, self.divisor)
