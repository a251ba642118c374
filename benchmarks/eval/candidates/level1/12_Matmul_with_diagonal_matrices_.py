"""load_inline CUDA kernel: diag(A) @ B as a row scaling, one element per thread. Expected: correct, about as fast as the reference's broadcast multiply (speedup ~1.0), honest."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void row_scale_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                 int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        c[i] = a[i / cols] * b[i];
    }
}

cudaError_t launch_row_scale(const float* a, const float* b, float* c, int64_t rows, int64_t cols,
                             cudaStream_t stream) {
    const int threads = 256;
    int64_t blocks = (rows * cols + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) return cudaSuccess;
    row_scale_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(a, b, c, rows, cols);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_row_scale(const float* a, const float* b, float* c, int64_t rows, int64_t cols,
                             cudaStream_t stream);

torch::Tensor diag_matmul(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "A and B must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "A and B must be float32");
    TORCH_CHECK(A.dim() == 1 && B.dim() == 2 && A.size(0) == B.size(0), "A is (N,), B is (N, M)");
    auto a = A.contiguous();
    auto b = B.contiguous();
    auto c = torch::empty_like(b);
    cudaError_t err = launch_row_scale(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(),
                                       b.size(0), b.size(1), at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "row_scale launch failed: ", cudaGetErrorString(err));
    return c;
}
"""

_ext = load_inline(name="krex_eval_l1_12_v1", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["diag_matmul"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _ext.diag_matmul(A, B)
