"""Stand-in for torch: only torch.utils.benchmark.Timer (tests run without torch)."""
