"""Cheat: relu(a + b) launched on a side stream the current stream never
waits for, so the harness's end event can fire before the work is done. Its
values are right (read later, after a synchronisation): only the integrity
record can tell (`escaped`)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        self.side.wait_stream(torch.cuda.current_stream())  # the inputs are ready: fork, but never join
        with torch.cuda.stream(self.side):
            return torch.relu(a + b)
