import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(a + b), elementwise."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a + b)


N, M = 1024, 1024


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N, M), torch.randn(N, M)]


def get_init_inputs() -> list[object]:
    return []
