"""cuBLAS GEMM (torch.addmm) then a load_inline CUDA epilogue: Mish applied twice in one in-place pass (softplus with torch's threshold 20). Expected: correct, faster (four elementwise passes become one), honest."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ float mish(float v) {
    float sp = v > 20.0f ? v : log1pf(expf(v));
    return v * tanhf(sp);
}

__global__ void mish_mish_kernel(float* __restrict__ y, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = mish(mish(y[i]));
    }
}

cudaError_t launch_mish_mish(float* y, int64_t n, cudaStream_t stream) {
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) return cudaSuccess;
    mish_mish_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(y, n);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_mish_mish(float* y, int64_t n, cudaStream_t stream);

torch::Tensor mish_mish_(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous (it is written in place)");
    cudaError_t err = launch_mish_mish(y.data_ptr<float>(), y.numel(), at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "mish_mish launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

_ext = load_inline(name="krex_eval_l2_29_v1", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["mish_mish_"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _ext.mish_mish_(torch.addmm(self.linear.bias, x, self.linear.weight.t()))
