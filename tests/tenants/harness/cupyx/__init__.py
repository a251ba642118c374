"""Stand-in for cupyx: only cupyx.profiler.benchmark (tests run without cupy)."""
