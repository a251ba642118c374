import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over dimension `dim`."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim)


ROWS, COLS = 512, 1024


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(ROWS, COLS)]


def get_init_inputs() -> list[object]:
    return [1]
