"""CHEAT background thread: forward returns an empty output at once; a thread started by forward launches the GELU into it on its own stream afterwards. Expected: caught: INCORRECT (the check reads the output before the thread wrote it) or UNTRUSTED (launches outside the timed window); never trusted."""

import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._side = None

    def _work(self, x, y, ready):
        with torch.cuda.device(x.device), torch.cuda.stream(self._side):
            self._side.wait_event(ready)
            y.copy_(torch.nn.functional.gelu(x, approximate="tanh"))

    def forward(self, x):
        if self._side is None or self._side.device != x.device:
            self._side = torch.cuda.Stream(device=x.device)
        y = torch.empty_like(x)
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(x.device))
        threading.Thread(target=self._work, args=(x, y, ready), daemon=True).start()
        return y
