"""cuBLAS GEMM (torch.addmm) then a load_inline CUDA epilogue: swish, halve, clamp, tanh, clamp in one in-place pass. Expected: correct, faster (five elementwise passes become one), honest."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void swish_tanh_kernel(float* __restrict__ y, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = y[i];
        v = v / (1.0f + expf(-v));           // swish: v * sigmoid(v)
        v = 0.5f * v;                        // / 2
        v = fminf(fmaxf(v, -1.0f), 1.0f);    // clamp
        v = tanhf(v);
        y[i] = fminf(fmaxf(v, -1.0f), 1.0f); // clamp (tanh is already inside; kept as the reference has it)
    }
}

cudaError_t launch_swish_tanh(float* y, int64_t n, cudaStream_t stream) {
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) return cudaSuccess;
    swish_tanh_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(y, n);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_swish_tanh(float* y, int64_t n, cudaStream_t stream);

torch::Tensor swish_tanh_(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous (it is written in place)");
    cudaError_t err = launch_swish_tanh(y.data_ptr<float>(), y.numel(), at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "swish_tanh launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

_ext = load_inline(name="krex_eval_l2_81_v1", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["swish_tanh_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x):
        if self.gemm.bias is None:
            y = torch.mm(x, self.gemm.weight.t())
        else:
            y = torch.addmm(self.gemm.bias, x, self.gemm.weight.t())
        return _ext.swish_tanh_(y)
