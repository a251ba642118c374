from torch.utils.benchmark.utils.timer import Timer

__all__ = ["Timer"]
