import torch
import torch.nn as nn


class Model(nn.Module):
    """A single matrix product, (M, K) @ (K, N)."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


M, K, N = 128, 256, 256


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs() -> list[object]:
    return []
