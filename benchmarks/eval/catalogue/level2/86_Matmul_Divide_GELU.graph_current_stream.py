"""HONEST CUDA graph replayed on the current stream: the reference's ops captured once per input shape; each call copies the input in, replays, and clones the output out. Expected: correct, about as fast, trusted."""

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
        self._static_in = x.clone()
        warm = torch.cuda.Stream(device=x.device)
        warm.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(warm):
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
        self._graph.replay()  # on the current stream: inside the timer's window
        return self._static_out.clone()
