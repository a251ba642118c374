"""Stand-in for torch.utils.benchmark's Timer: its timing methods, with torch's names."""

from _timing import time_calls


class Measurement:
    def __init__(self, times_ms):
        self.times = [t / 1000 for t in times_ms]
        self.mean = sum(self.times) / len(self.times)


class Timer:
    def __init__(self, stmt="pass", setup="pass", globals=None, label=None):
        self._fn = lambda: eval(stmt, dict(globals or {}))

    def timeit(self, number=3):
        return Measurement(time_calls(self._fn, number))

    def blocked_autorange(self, callback=None, min_run_time=0.0):
        return self.timeit(3)  # a wrapped method calling another: one region

    def adaptive_autorange(self, threshold=0.1, max_run_time=0.0, min_run_time=0.0):
        return Measurement(time_calls(self._fn, 3))
