"""krex_bench.clock_watch: the thread that samples the SM clock and throttle
reasons while a command's repeats run, with a reader standing in for NVML
(no GPU here)."""

from __future__ import annotations

import threading

from krex_bench.clock_watch import ClockWatch


def test_the_watch_keeps_the_lowest_clock_and_every_reason_seen() -> None:
    readings = iter([(1980, 0, 500_000, 50), (1410, 0x4, 700_000, 61), (1980, 0x1, None, 55)]
                    + [(1980, 0, 600_000, 55)] * 10_000)
    enough = threading.Event()
    seen = []

    def read() -> tuple[int | None, int | None, int | None, int | None]:
        seen.append(1)
        if len(seen) >= 5:
            enough.set()
        return next(readings)

    with ClockWatch(read, period_s=0.001) as watch:
        enough.wait(30)
    summary = watch.summary()
    assert summary["sm_clock_min_mhz"] == 1410 and summary["sm_clock_max_mhz"] == 1980
    assert summary["clock_samples"] == len(seen) >= 5
    assert summary["throttle_seen"] == ["sw_power_cap"]  # idle (0x1) is no reason
    assert summary["power_max_w"] == 700.0 and (summary["temp_min_c"], summary["temp_max_c"]) == (50, 61)


def test_a_failing_reader_is_missing_samples_and_no_reader_is_none() -> None:
    def broken() -> tuple[int | None, int | None, int | None, int | None]:
        raise RuntimeError("NVML_ERROR_UNKNOWN")

    with ClockWatch(broken, period_s=0.001) as watch:
        pass
    summary = watch.summary()
    # Nothing read is not "nothing seen": the reasons are None, and the failures counted.
    assert summary["throttle_seen"] is None and summary["clock_samples"] == 0 and summary["watch_failed"] >= 1
    with ClockWatch(None) as none:
        pass
    assert none.summary()["throttle_seen"] is None and none.summary()["clock_samples"] == 0


def test_fields_the_gpu_does_not_report_are_none_and_the_rest_still_counts() -> None:
    # Power and the throttle reasons unsupported (as under MIG or vGPU): the clock still counts.
    with ClockWatch(lambda: (1980, None, None, 60), period_s=0.001) as watch:
        pass
    summary = watch.summary()
    assert summary["sm_clock_min_mhz"] == 1980 and summary["clock_samples"] >= 1
    assert summary["throttle_seen"] is None and summary["power_max_w"] is None and summary["temp_max_c"] == 60


def test_each_placement_gets_the_samples_taken_while_it_ran() -> None:
    """Three spans marked around the samples: the first saw 1980 MHz, the
    second the power cap at 1600, the third no sample at all."""
    watch = ClockWatch(lambda: (0, None, None, None))
    watch.samples = [(1.0, (1980, 0, 500_000, 50)), (1.5, (1980, 0, 510_000, 51)),
                     (2.2, (1600, 0x4, 700_000, 60)), (9.0, (1980, 0, 500_000, 50))]
    first, second, third = watch.windows([0.5, 2.0, 3.0, 4.0])
    assert (first["clock_samples"], first["sm_clock_min_mhz"], first["throttle_seen"]) == (2, 1980, [])
    assert (second["sm_clock_min_mhz"], second["throttle_seen"], second["power_max_w"]) == (1600, ["sw_power_cap"], 700.0)
    assert third == {"clock_samples": 0, "sm_clock_min_mhz": None, "throttle_seen": None, "power_max_w": None,
                     "temp_max_c": None}
