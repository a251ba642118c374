"""cuBLAS GEMM then a load_inline CUDA epilogue (min with the constant, subtract), the constant passed as a device pointer. Expected: correct, slightly faster, honest."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void min_sub_kernel(float* __restrict__ y, const float* __restrict__ c, int64_t n) {
    const float k = c[0];
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = fminf(y[i], k) - k;
    }
}

cudaError_t launch_min_sub(float* y, const float* c, int64_t n, cudaStream_t stream) {
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) return cudaSuccess;
    min_sub_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(y, c, n);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_min_sub(float* y, const float* c, int64_t n, cudaStream_t stream);

torch::Tensor min_sub_(torch::Tensor y, torch::Tensor c) {
    TORCH_CHECK(y.is_cuda() && c.is_cuda(), "y and c must be CUDA tensors");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32 && c.scalar_type() == torch::kFloat32, "float32 only");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous (it is written in place)");
    TORCH_CHECK(c.numel() == 1, "c is one value");
    auto cc = c.contiguous();
    cudaError_t err = launch_min_sub(y.data_ptr<float>(), cc.data_ptr<float>(), y.numel(),
                                     at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "min_sub launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

_ext = load_inline(name="krex_eval_l2_68_v2", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["min_sub_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, constant):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.constant = nn.Parameter(torch.tensor(constant))

    def forward(self, x):
        return _ext.min_sub_(torch.addmm(self.linear.bias, x, self.linear.weight.t()), self.constant.detach())
