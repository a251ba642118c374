"""relu(a + b) entirely on a side stream, forked from the current stream and
joined back before returning: no kernel of its own on the current stream."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            out = torch.relu(a + b)
        main.wait_stream(self.side)
        return out
