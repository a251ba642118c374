from cupyx.profiler._time import benchmark

__all__ = ["benchmark"]
