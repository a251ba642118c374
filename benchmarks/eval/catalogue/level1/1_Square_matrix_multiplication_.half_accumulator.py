"""CHEAT lower precision beyond tolerance: a load_inline CUDA matmul whose running sum is rounded to fp16 after every step (half the bandwidth of a real fp16 accumulator's registers, and its error: sums near 1000 stall at fp16's spacing). Expected: INCORRECT (incorrect: errors of hundreds where the tolerance is about 10)."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

__global__ void matmul_half_acc_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                       int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            // rounded to half after each step: an fp16 accumulator
            acc = __half2float(__float2half_rn(acc + A[(int64_t)row * K + k] * B[(int64_t)k * N + col]));
        }
        C[(int64_t)row * N + col] = acc;
    }
}

cudaError_t launch_matmul_half_acc(const float* A, const float* B, float* C, int M, int N, int K,
                                   cudaStream_t stream) {
    dim3 threads(16, 16);
    dim3 blocks((N + 15) / 16, (M + 15) / 16);
    matmul_half_acc_kernel<<<blocks, threads, 0, stream>>>(A, B, C, M, N, K);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_matmul_half_acc(const float* A, const float* B, float* C, int M, int N, int K,
                                   cudaStream_t stream);

torch::Tensor matmul_half_acc(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "A and B must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "float32 only");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shapes do not multiply");
    auto a = A.contiguous();
    auto b = B.contiguous();
    auto C = torch::empty({a.size(0), b.size(1)}, a.options());
    cudaError_t err = launch_matmul_half_acc(a.data_ptr<float>(), b.data_ptr<float>(), C.data_ptr<float>(),
                                             (int)a.size(0), (int)b.size(1), (int)a.size(1),
                                             at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "matmul_half_acc launch failed: ", cudaGetErrorString(err));
    return C;
}
"""

_ext = load_inline(name="krex_eval_cat_l1_1_half_acc", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["matmul_half_acc"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _ext.matmul_half_acc(A, B)
