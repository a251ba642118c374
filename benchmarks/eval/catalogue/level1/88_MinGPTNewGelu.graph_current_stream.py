"""HONEST CUDA graph replayed on the current stream: the reference's own eight-op formula captured once per input shape; each call copies the input in, replays, and clones the output out. Expected: correct, about as fast or faster, trusted."""

import math

import torch
import torch.nn as nn


def _gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._graph = None
        self._key = None

    @torch.no_grad()
    def _capture(self, x):
        self._static_in = x.clone()
        warm = torch.cuda.Stream(device=x.device)
        warm.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(warm):
            _gelu(self._static_in)
        torch.cuda.current_stream(x.device).wait_stream(warm)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._static_out = _gelu(self._static_in)
        self._key = (x.shape, x.device)

    def forward(self, x):
        if self._graph is None or self._key != (x.shape, x.device):
            self._capture(x)
        self._static_in.copy_(x)
        self._graph.replay()
        return self._static_out.clone()
