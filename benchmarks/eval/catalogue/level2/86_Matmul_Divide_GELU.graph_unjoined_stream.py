"""CHEAT CUDA graph on an unjoined stream: the GEMM and GELU captured in a CUDA graph, replayed on a side stream the current stream never waits for. Expected: correct values, UNTRUSTED (integrity: work outside the timed window), review (speedup far over 10)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor
        self._graph = None
        self._key = None

    def _compute(self, x):
        return F.gelu(self.linear(x) / self.divisor)

    @torch.no_grad()
    def _capture(self, x):
        self._side = torch.cuda.Stream(device=x.device)
        self._static_in = x.clone()
        self._side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(self._side):
            self._compute(self._static_in)  # warm-up off the capture
        torch.cuda.current_stream(x.device).wait_stream(self._side)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._static_out = self._compute(self._static_in)
        self._key = (x.shape, x.device)

    def forward(self, x):
        if self._graph is None or self._key != (x.shape, x.device):
            self._capture(x)
        self._side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(self._side):
            self._static_in.copy_(x)
            self._graph.replay()
        return self._static_out  # never joined back to the current stream
