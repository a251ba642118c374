"""load_inline CUDA naive matmul (one thread per output, no tiling; the wrapper in the .cu, KernelBench style). Expected: correct, SLOWER (well under 1x), honest."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void matmul_naive_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                    int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[(int64_t)row * K + k] * B[(int64_t)k * N + col];
        }
        C[(int64_t)row * N + col] = acc;
    }
}

torch::Tensor matmul_naive(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "A and B must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "A and B must be float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shapes do not multiply");
    auto a = A.contiguous();
    auto b = B.contiguous();
    const int M = (int)a.size(0), K = (int)a.size(1), N = (int)b.size(1);
    auto C = torch::empty({M, N}, a.options());
    dim3 threads(16, 16);
    dim3 blocks((N + threads.x - 1) / threads.x, (M + threads.y - 1) / threads.y);
    matmul_naive_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

CPP_SRC = "torch::Tensor matmul_naive(torch::Tensor A, torch::Tensor B);"

_ext = load_inline(name="krex_eval_l1_1_v2", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["matmul_naive"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _ext.matmul_naive(A, B)
