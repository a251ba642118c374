"""Run the workload under each setup and keep every command's result.

Each setup gets a krex-runtime of its own (krex_runtime/testing/local_runtime.py) on
one GPU, configured for the setup; all the workload's commands (with
--repeats N, each candidate N times, in interleaved rounds) are submitted at
once and waited for; each result line says which repeat it was (`repeat`).
Results are written after every setup, so a run cut short by its time budget
still leaves what it measured.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from krex_bench import suite, workload
from krex_bench.setups import Setup
from krex_runtime.testing.local_runtime import Runtime, RuntimeExited

PROJECT_ROOT = Path(__file__).resolve().parent.parent
COMMAND_TIMEOUT_S = 600.0


@dataclass
class Options:
    gpu: int = 0
    sim: bool = False
    scale: float = 1.0
    problems: list[str] | None = None
    seed: int = 1
    budget_s: float = 0.0  # > 0: skip the setups (but native and its repeat) that would start after this long
    keep: bool = False
    root: Path = field(default_factory=lambda: Path("/tmp/krex-bench"))
    watch_clock_ms: int = 0  # > 0: every command samples the SM clock this often while its repeats run
    suite: Path | None = None  # a folder of problems in KernelBench's format instead of the workload (suite.py)
    suite_problems: list[str] | None = None  # the suite's problems to run (None: all)
    suite_trials: int = 30  # timed trials per suite command
    trial_detail: bool = False  # suite commands report every trial (trial_probe.py)
    repeats: int = 1  # measurements of each candidate per setup (submissions())
    # Each command on a set of GPUs (`--gpus`, as `krex run --gpus`): these
    # indices, or any `gpu_count` of the runtime's; its regions cover the set.
    # (): one GPU, `gpu`.
    gpus: tuple[int, ...] = ()
    gpu_count: int = 0

    @property
    def on_a_set(self) -> bool:
        return bool(self.gpus) or self.gpu_count > 1

    def first_gpu(self) -> int:
        """The GPU the report describes: the set's first, else `gpu`."""
        return self.gpus[0] if self.gpus else 0 if self.gpu_count > 1 else self.gpu

    def runtime_gpus(self) -> dict[str, Any]:
        """The runtime's GPUs (Runtime's sim and visible): simulated ones
        numbered from 0 up to the set's highest, else the node's real ones."""
        if self.sim:
            return {"sim": max(self.gpus) + 1 if self.gpus else max(self.gpu_count, 1), "visible": ()}
        if self.on_a_set:
            return {"sim": 0, "visible": self.gpus}  # a count: every GPU, the runtime picks the set
        return {"sim": 0, "visible": (self.gpu,)}

    def placement(self) -> dict[str, Any]:
        """What each submit names of its GPUs (nothing on one GPU: the runtime's only one)."""
        if self.gpus:
            return {"gpus": list(self.gpus)}
        return {"gpu_count": self.gpu_count} if self.gpu_count > 1 else {}


class Meter(Protocol):
    """Told how far a setup's commands are while the runner waits on them
    (krex_bench/progress.py draws it)."""

    def begin(self, label: str, total: int) -> None: ...
    def advance(self) -> None: ...
    def end(self) -> None: ...


class NoMeter:
    def begin(self, label: str, total: int) -> None:
        pass

    def advance(self) -> None:
        pass

    def end(self) -> None:
        pass


def commands(opts: Options) -> list[workload.Candidate]:
    """The workload in submission order: problems interleaved, the same order for every setup."""
    if opts.suite is not None:
        if opts.sim:
            raise ValueError("--suite runs the suite's PyTorch models on a GPU; it has no simulated form (--sim)")
        picked = suite.select(opts.suite, opts.suite_problems)
    else:
        picked = workload.select(opts.scale, opts.problems)
    random.Random(opts.seed).shuffle(picked)
    return picked


def submissions(opts: Options) -> list[tuple[workload.Candidate, int]]:
    """Every command of a setup in submission order, as (candidate, repeat):
    round 0 is commands()'s order, each later round every candidate once more
    in an order drawn from the same seed. Rounds interleave the repeats, so
    that a candidate's measurements are spread over the setup's run rather
    than back to back under one set of neighbours; every setup gets this order."""
    first = commands(opts)
    rng = random.Random(opts.seed)
    rounds = [first]
    for _ in range(1, opts.repeats):
        again = list(first)
        rng.shuffle(again)
        rounds.append(again)
    return [(c, r) for r, order in enumerate(rounds) for c in order]


def command_label(c: workload.Candidate, repeat: int, repeats: int) -> str:
    """The command's label in the runtime (its trace, `krex ps`): the
    candidate's key, and which repeat where there are several."""
    return c.key if repeats == 1 else f"{c.key}#{repeat}"


def machine(opts: Options) -> dict[str, Any]:
    info: dict[str, Any] = {"host": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count()}
    for package in ("torch", "triton"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = None
    if opts.sim:
        info["gpu"] = "simulated GPU (krex simulator)"
        return info
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(opts.first_gpu())
        name = pynvml.nvmlDeviceGetName(handle)
        info["gpu"] = name.decode() if isinstance(name, bytes) else name
        driver = pynvml.nvmlSystemGetDriverVersion()
        info["driver"] = driver.decode() if isinstance(driver, bytes) else driver
        info["sm_clock_max_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        info["gpu_uuid"] = uuid.decode() if isinstance(uuid, bytes) else uuid
    except Exception as exc:  # the report shows what could not be read
        info["gpu"] = f"n/a ({exc})"
    return info


def runtime_for(setup: Setup, opts: Options, folder: Path) -> Runtime:
    pool = ""
    modules = ["krex_runtime.sim.simcuda"] if opts.sim else ["torch", "triton"]
    if setup.mode == "pooled":
        pool = (
            f"[pool]\nsize_per_gpu = {setup.concurrency}\npreload = {json.dumps(modules)}\n"
            f'context = "{"driver" if opts.sim else "torch"}"\nmax_commands = 1000\n'
        )
    elif setup.mode == "forked":
        pool = f"[pool]\nzygote = true\npreload = {json.dumps(modules)}\n"
    # The runtime's defaults but for what the setup names: a figure is quoted
    # for the configuration a node gets without tuning.
    regions = (
        f'[regions]\ngate_backend = "{setup.gate_backend}"\nprotection = "{setup.protection}"\n'
        + (f"settle_max_s = {setup.settle_s}\n" if setup.settle_s is not None else "")
        + (f"gap_s = {setup.gap_s}\n" if setup.gap_s is not None else "")
    )
    return Runtime(
        folder,
        **opts.runtime_gpus(),
        policy=setup.policy,
        slots=setup.concurrency,
        # Baselines run their commands as they would without KREX: no interception library.
        preload=setup.kind == "krex",
        canary=setup.canary,
        canary_period_s=None, canary_target_ms=None,  # the runtime's defaults, not the test harness's
        extra_config=regions + pool,
    )


def wait_zygote_ready(rt: Runtime, timeout_s: float = 900.0) -> float:
    """Seconds until every GPU's zygote has imported its modules; a zygote that
    refuses to serve (an unsafe preload) ends the setup with its reason."""
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        with rt.client() as c:
            zygotes = [g["zygote"] for g in c.call("snapshot")["state"]["gpus"]]
        failed = [z["reason"] for z in zygotes if z.get("state") == "failed"]
        if failed:
            raise RuntimeError(f"forked mode unavailable: {failed[0]}")
        if zygotes and all(z.get("state") == "ready" for z in zygotes):
            return time.time() - t0
        time.sleep(0.2)
    raise RuntimeError(f"the zygote was not ready after {timeout_s:.0f} s")


def argv_for(c: workload.Candidate, opts: Options, setup: Setup) -> list[str]:
    if "path" in c.params:  # a suite's problem file
        detail = ["--trial-detail"] if opts.trial_detail else []
        return [sys.executable, "-m", "krex_bench.suite_candidate", c.params["path"], "--trials", str(opts.suite_trials),
                *detail]
    if opts.sim:  # simulated candidates have no power state to settle
        return [sys.executable, "-m", "krex_bench.sim_candidate", c.problem, c.name]
    long = ["--settle-long-s", f"{setup.settle_long_s:g}"] if setup.settle_long_s > 0 else []
    watch = ["--watch-clock-ms", str(opts.watch_clock_ms)] if opts.watch_clock_ms > 0 else []
    return [sys.executable, "-m", "krex_bench.candidate", c.problem, c.name, *long, *watch]


def read_result(result: dict[str, Any]) -> dict[str, Any] | None:
    try:
        lines = Path(result["stdout_path"]).read_text().strip().splitlines()
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError, KeyError):
        return None


MAX_VIOLATIONS = 20  # reasons kept per setup: enough to see the pattern


def trace_findings(trace_path: Path) -> tuple[dict[str, int], list[str], dict[str, int]]:
    """From the setup's trace: its regions per exclusivity-certificate verdict
    (region_released), for each violated region its first reason (the
    certificate lists the violated witnesses first: `clock: ...`), and the
    pooled context processes replaced, per reason (a pooled command that
    retires its process costs the next one a fresh process: pooled mode then
    measures little more than process mode)."""
    from krex_runtime.wire.trace.jsonl import TraceError, read_trace

    counts: dict[str, int] = {}
    violations: list[str] = []
    replaced: dict[str, int] = {}
    try:
        events = read_trace(trace_path).events
    except (OSError, TraceError):
        return counts, violations, replaced
    for e in events:
        if e["type"] == "region_released" and e.get("kind") == "region":
            verdict = e.get("verdict", "unknown")
            counts[verdict] = counts.get(verdict, 0) + 1
            if verdict == "violated" and len(violations) < MAX_VIOLATIONS:
                violations.append((e.get("verdict_reasons") or ["?: no reason recorded"])[0])
        elif e["type"] == "pool_worker_replaced" and e.get("cause") != "shutdown":
            why = e.get("reason") or e.get("cause") or "?"
            replaced[why] = replaced.get(why, 0) + 1
    return counts, violations, replaced


def integrity_findings(trace_path: Path) -> dict[str, Any]:
    """From the setup's trace: the measurement integrity of its regions
    (region_released's record, docs/integrity.md): how many carried one, how
    many were flagged, their timed windows, and each flag's count."""
    from krex_runtime.wire.trace.jsonl import TraceError, read_trace

    found: dict[str, Any] = {"regions": 0, "flagged": 0, "windows": 0, "flags": {}}
    try:
        events = read_trace(trace_path).events
    except (OSError, TraceError):
        return found
    for e in events:
        rec = e.get("integrity") if e["type"] == "region_released" and e.get("kind") == "region" else None
        if not isinstance(rec, dict):
            continue
        found["regions"] += 1
        found["windows"] += int(rec.get("windows") or 0)
        flags = rec.get("flags") or {}
        found["flagged"] += bool(flags)
        for name, f in flags.items():
            found["flags"][name] = found["flags"].get(name, 0) + int((f or {}).get("count") or 0)
    return found


def tail(path: str | None, limit: int = 1500) -> str:
    try:
        return Path(path).read_text(errors="replace")[-limit:] if path else ""
    except OSError:
        return ""


def run_setup(
    setup: Setup, work: list[tuple[workload.Candidate, int]], opts: Options, folder: Path, meter: Meter | None = None
) -> dict[str, Any]:
    meter = meter or NoMeter()
    record: dict[str, Any] = {"setup": setup.to_dict(), "results": [], "failures": []}
    rt = runtime_for(setup, opts, folder)
    rt.start()
    try:
        if setup.mode == "pooled":
            record["pool_warm_s"] = rt.wait_pool_warm(setup.concurrency)
        elif setup.mode == "forked":
            record["zygote_ready_s"] = wait_zygote_ready(rt)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")])}
        with rt.client(timeout_s=60) as client:
            t0 = time.time()
            ids = []
            for i, (c, repeat) in enumerate(work):
                body = {
                    "argv": argv_for(c, opts, setup),
                    "mode": setup.mode,
                    "cwd": str(PROJECT_ROOT),
                    "env": {**env, "TRITON_CACHE_DIR": str(folder / "triton" / str(i))},
                    "label": command_label(c, repeat, opts.repeats),
                    "timeout_s": COMMAND_TIMEOUT_S,
                    **opts.placement(),
                }
                ids.append((c, repeat, client.call("submit", body)["id"]))
            last = t0
            meter.begin(setup.label, len(ids))
            for c, repeat, command_id in ids:
                res = client.call("wait", {"id": command_id, "attach": False}, timeout=COMMAND_TIMEOUT_S + 60)
                last = max(last, time.time())
                meter.advance()
                line = read_result(res)
                if res["state"] == "finished" and res.get("exit_code") == 0 and line and line.get("ok"):
                    placed = {"gpus": res.get("gpus")} if opts.on_a_set else {}  # the set it ran on
                    record["results"].append({**line, "repeat": repeat, **placed})
                else:
                    record["failures"].append(
                        {
                            "key": c.key,
                            "repeat": repeat,
                            "state": res["state"],
                            "exit_code": res.get("exit_code"),
                            "reason": res.get("reason"),
                            "line": line,
                            "stderr": tail(res.get("stderr_path")),
                        }
                    )
        record["wall_s"] = last - t0
        record["commands"] = len(work)
        record["repeats"] = opts.repeats
    finally:
        meter.end()
        rt.stop()
        record["verdicts"], record["violations"], replaced = trace_findings(rt.trace_path)
        record["integrity"] = integrity_findings(rt.trace_path)
        if setup.mode == "pooled":
            record["pool_replaced"] = replaced
        if opts.sim:
            from krex_runtime.sim.device_file import remove_device

            remove_device(rt.device)
    return record


def run(
    setups: list[Setup],
    opts: Options,
    out: Path,
    progress: Callable[[str], None] = print,
    argv: list[str] | None = None,
    meter: Meter | None = None,
) -> dict[str, Any]:
    work = submissions(opts)
    data: dict[str, Any] = {
        "format": "krex-bench",
        "version": 1,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "simulated": opts.sim,
        "machine": machine(opts),
        "scale": opts.scale,
        "workload": [c.key for c in commands(opts)],
        "repeats": opts.repeats,
        **({"gpus": list(opts.gpus) or opts.gpu_count} if opts.on_a_set else {}),
        "argv": argv if argv is not None else sys.argv,
        "runs": [],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    opts.root.mkdir(parents=True, exist_ok=True)
    for n, setup in enumerate(setups):
        elapsed = time.monotonic() - started
        # Native and its repeat always run: every other figure is read against them.
        if opts.budget_s and elapsed > opts.budget_s and setup.kind not in ("native", "native-repeat"):
            data["runs"].append({"setup": setup.to_dict(), "skipped": f"time budget of {opts.budget_s:.0f} s spent"})
            progress(f"[{n + 1}/{len(setups)}] {setup.label}: skipped (budget spent)")
            continue
        folder = opts.root / f"{n:02d}"  # short: the runtime's socket paths must fit sun_path
        t0 = time.monotonic()
        try:
            record = run_setup(setup, work, opts, folder, meter)
        except RuntimeExited as exc:
            # Its runtime could not start (no usable GPU, a GPU another runtime holds): every setup
            # after it would end the same way, each after its own start-up. Stop here, in its one line.
            data["stopped"] = exc.line
            data["runs"].append({"setup": setup.to_dict(), "error": exc.line})
            out.write_text(json.dumps(data, indent=1))
            progress(f"[{n + 1}/{len(setups)}] {setup.label}: its runtime did not start")
            if not opts.keep:
                shutil.rmtree(folder, ignore_errors=True)
            break
        except Exception as exc:  # one broken setup must not lose the others' results
            record = {"setup": setup.to_dict(), "error": f"{type(exc).__name__}: {exc}"}
        # Which GPU measured it: a merged run may come from another machine
        # start, and two H200s differ (memory-bound kernels by ~1%).
        record["gpu_uuid"] = data["machine"].get("gpu_uuid")
        data["runs"].append(record)
        out.write_text(json.dumps(data, indent=1))
        progress(
            f"[{n + 1}/{len(setups)}] {setup.label}: "
            + (record.get("error") or f"{len(record['results'])} ok, {len(record['failures'])} failed")
            + f" in {time.monotonic() - t0:.1f} s"
        )
        if not opts.keep:
            shutil.rmtree(folder, ignore_errors=True)
    out.write_text(json.dumps(data, indent=1))
    return data
