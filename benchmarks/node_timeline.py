"""A timeline of what the GPU and its processes do, sampled from outside, for
finding what slowed a trial (benchmarks/slow_trials.py joins it with each
trial's start and end).

Every --period-ms it reads, through NVML: the processes with a context on
the GPU, the device memory in use, the SM clock and the clock-event
(throttle) reasons, and writes a line only when one of them changed (so a
run of minutes stays small). Every second it also drains NVML's own SM-clock
sample buffer (the driver samples faster than this loop can ask), and reads
the power and thermal violation counters. Times are wall-clock ns
(time.time_ns()), as the trials' are.

Usage: python3 benchmarks/node_timeline.py --gpu 0 --out timeline.jsonl [--period-ms 2] [--seconds 600]
Stops at SIGTERM/SIGINT or after --seconds.
"""

from __future__ import annotations

import argparse
import json
import signal
import time

MEM_STEP = 64 << 20  # a change in memory in use smaller than this is not written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--period-ms", type=float, default=2.0)
    ap.add_argument("--seconds", type=float, default=600.0)
    args = ap.parse_args()
    import pynvml as nv

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(args.gpu)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    last: dict = {}
    last_sample_us = 0
    next_buffer = 0.0
    end = time.monotonic() + args.seconds
    with open(args.out, "w") as out:
        out.write(json.dumps({"kind": "start", "t": time.time_ns(), "gpu": args.gpu,
                              "max_sm_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)}) + "\n")
        while not stop and time.monotonic() < end:
            t = time.time_ns()
            try:
                pids = sorted(p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h))
            except nv.NVMLError:
                pids = None
            mem = nv.nvmlDeviceGetMemoryInfo(h).used
            sm = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
            reasons = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h) & ~0x1  # idle is no reason
            now = {"pids": pids, "sm": sm, "reasons": reasons}
            if now != {k: last.get(k) for k in now} or abs(mem - last.get("mem", 0)) >= MEM_STEP:
                out.write(json.dumps({"kind": "s", "t": t, "pids": pids, "mem": mem, "sm": sm, "reasons": reasons}) + "\n")
                last = {**now, "mem": mem}
            if time.monotonic() >= next_buffer:
                next_buffer = time.monotonic() + 1.0
                try:
                    _type, samples = nv.nvmlDeviceGetSamples(h, nv.NVML_PROCESSOR_CLK_SAMPLES, last_sample_us)
                    rows = [(s.timeStamp, s.sampleValue.uiVal) for s in samples if s.timeStamp > last_sample_us]
                    if rows:
                        last_sample_us = max(r[0] for r in rows)
                        out.write(json.dumps({"kind": "clk", "t": t, "us_mhz": rows}) + "\n")
                except nv.NVMLError:
                    pass
                v = {}
                for name, policy in (("power", nv.NVML_PERF_POLICY_POWER), ("thermal", nv.NVML_PERF_POLICY_THERMAL)):
                    try:
                        v[name] = nv.nvmlDeviceGetViolationStatus(h, policy).violationTime
                    except nv.NVMLError:
                        pass
                out.write(json.dumps({"kind": "viol", "t": t, **v}) + "\n")
            time.sleep(args.period_ms / 1000)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
