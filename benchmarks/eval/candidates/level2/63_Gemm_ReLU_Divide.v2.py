"""load_inline CUDA epilogue with an off-by-one index (reads y[i + 1] for element i: every output shifted by one). Expected: INCORRECT (incorrect), honest."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void relu_div_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t n, float inv_divisor) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t src = i + 1 < n ? i + 1 : i;  // the bug: one past the element it writes
        float v = in[src];
        out[i] = (v > 0.0f ? v : 0.0f) * inv_divisor;
    }
}

cudaError_t launch_relu_div(const float* in, float* out, int64_t n, float inv_divisor, cudaStream_t stream) {
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) return cudaSuccess;
    relu_div_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(in, out, n, inv_divisor);
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_relu_div(const float* in, float* out, int64_t n, float inv_divisor, cudaStream_t stream);

torch::Tensor relu_div(torch::Tensor y, double divisor) {
    TORCH_CHECK(y.is_cuda(), "y must be a CUDA tensor");
    TORCH_CHECK(y.scalar_type() == torch::kFloat32, "y must be float32");
    auto in = y.contiguous();
    auto out = torch::empty_like(in);
    cudaError_t err = launch_relu_div(in.data_ptr<float>(), out.data_ptr<float>(), in.numel(), (float)(1.0 / divisor),
                                      at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "relu_div launch failed: ", cudaGetErrorString(err));
    return out;
}
"""

_ext = load_inline(name="krex_eval_l2_63_v2", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["relu_div"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        return _ext.relu_div(self.linear(x), self.divisor)
