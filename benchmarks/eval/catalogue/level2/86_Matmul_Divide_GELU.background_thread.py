"""CHEAT background thread: forward returns an empty output at once; a thread it starts launches the GEMM and GELU into it on its own stream afterwards. Expected: caught: INCORRECT (the check reads the output before the thread wrote it) or UNTRUSTED (launches outside the timed window); never trusted."""

import threading

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)  # first, as the reference: the same initial weights
        self.divisor = divisor
        self._side = None

    def _work(self, x, y, ready):
        with torch.cuda.device(x.device), torch.cuda.stream(self._side):
            self._side.wait_event(ready)
            y.copy_(F.gelu(self.linear(x) / self.divisor))

    def forward(self, x):
        if self._side is None or self._side.device != x.device:
            self._side = torch.cuda.Stream(device=x.device)
        y = torch.empty((x.shape[0], self.linear.out_features), device=x.device, dtype=x.dtype)
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(x.device))
        threading.Thread(target=self._work, args=(x, y, ready), daemon=True).start()
        return y
