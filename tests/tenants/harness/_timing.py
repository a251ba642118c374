"""What the stand-in harnesses time with: CUDA events on the simulated device,
as triton's do_bench and torch's Timer do on a real one."""

from krex_runtime.sim.simcuda import SimCuda

_cuda = None


def time_calls(fn, n):
    """Milliseconds of each of `n` calls of fn, event-timed on the default stream."""
    global _cuda
    if _cuda is None:
        _cuda = SimCuda()
    start, end = _cuda.event(), _cuda.event()
    times = []
    for _ in range(n):
        _cuda.record(start)
        fn()
        _cuda.record(end)
        _cuda.event_synchronize(end)
        times.append(_cuda.elapsed_ms(start, end))
    _cuda.destroy_event(start)
    _cuda.destroy_event(end)
    return times
