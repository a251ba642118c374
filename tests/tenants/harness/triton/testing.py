"""Stand-in for triton.testing: do_bench and do_bench_cudagraph with triton's names."""

from _timing import time_calls


def do_bench(fn, warmup=1, rep=3, grad_to_none=None, quantiles=None, return_mode="mean"):
    times = time_calls(fn, warmup + rep)[warmup:]
    return sum(times) / len(times)


def do_bench_cudagraph(fn, rep=3, grad_to_none=None, quantiles=None, return_mode="mean"):
    # One harness calling another: under auto-regions still one region.
    return do_bench(fn, warmup=0, rep=rep)
