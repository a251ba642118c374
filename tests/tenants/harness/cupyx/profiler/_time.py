from _timing import time_calls


def benchmark(func, args=(), kwargs=None, n_repeat=3, n_warmup=1, name=None):
    return time_calls(lambda: func(*args, **(kwargs or {})), n_warmup + n_repeat)[n_warmup:]
