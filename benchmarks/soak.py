"""Soak: a krex runtime on simulated GPUs under continuous load and random faults.

Keeps `--tenants` commands in flight per GPU (simulated-CUDA tenants that
measure inside regions, light on the CPU: they mostly sleep) and injects, at
random times, tenant kills inside and outside regions, hangs past the region
hold limit and past the command timeout, cancels, floods (snapshot requests
on the read-only socket that are never read, idle region-channel
connections), a filling disk (the output folder, a small tmpfs where one can
be mounted, filled to the last byte for a few seconds), and runtime restarts
(SIGKILL, which the runtime's watchdog cleans up after, or SIGTERM, then a
new start on the same run folder). Each runtime start writes its own trace.
After every runtime end and at the end of the run it checks:

- every submitted command is accounted for in its runtime's trace: finished
  (with an exit status), failed, cancelled, timed out, or ended by a SIGKILL
  of its runtime (and then really gone after the restart); those that ended
  while the disk was full say how much output they lost;
- `status` answers during every flood, within FLOOD_STATUS_BOUND_S;
- after a SIGKILL the watchdog leaves nothing frozen, parked or leaked;
- nothing leaked: processes, cgroups, gates, sockets, held locks, shared
  memory after a SIGTERM and at the end; nothing frozen or parked once idle;
- the runtime's descriptors do not grow and its RSS stays flat.

Prints a table, writes a JSON result, exits 1 if any check fails.

  .venv/bin/python benchmarks/soak.py --minutes 30 --json soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import zmq
from soak_faults import NODE_FAULTS, RESTART_FAULTS, TENANT_FAULTS, Disk, Flood, kill, started_before
from soak_report import Command, Life, account, print_table, rss_summary, tallies

from krex_runtime.api import Client, RequestFailed, RuntimeUnavailable
from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire.protocol import endpoints
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.trace.jsonl import read_trace

HERE = Path(__file__).resolve().parent
TENANTS = HERE.parent / "tests" / "tenants"
PY = sys.executable
HOLD_LIMIT_S = 1.5
KEEP_FINISHED = 200
WATCHDOG_BOUND_S = 30.0  # after a SIGKILL, until the watchdog has left nothing behind


def regions_tenant(regions: int, pause_ms: float, hold_s: float = 0.0) -> list[str]:
    return [
        PY, str(TENANTS / "regions.py"), "--regions", str(regions), "--kernel-us", "300", "--repeats", "3",
        "--pause-ms", str(pause_ms), "--hold-s", str(hold_s),
    ]


class Soak:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.root = root
        self.rt = Runtime(
            root / "rt",
            sim=args.gpus,
            policy="krex",
            slots=args.tenants + 4,  # room for the fault carriers beside the load
            on_shutdown="cancel",
            shutdown_grace_s=2.0,
            # Small history: memory reaches its steady state early, so growth
            # after that is a leak rather than the bounded history filling up.
            keep_finished=KEEP_FINISHED,
            extra_config=(
                "[regions]\nstale_after_s = 1.0\nheartbeat_interval_s = 0.2\n"
                f'hold_limit_s = {HOLD_LIMIT_S}\non_hold_limit = "revoke"\n'
            ),
        )
        self.before = hygiene.baseline()
        self.lives: list[Life] = []
        self.commands: dict[str, Command] = {}
        self.in_flight: dict[int, set[str]] = {g: set() for g in range(args.gpus)}
        self.holding: dict[int, str] = {}  # gpu -> command id holding its region
        self.faults: Counter[str] = Counter()
        self.failures: list[str] = []
        self.rss: list[dict[str, Any]] = []
        self.fd_samples: list[int] = []
        self.refused = 0
        self.recovered_lines: list[str] = []
        self.output_files = 0
        self.t0 = time.monotonic()
        self.client: Client | None = None
        self.sub: zmq.Socket | None = None
        self.floods: list[Flood] = []
        self.flood_status_s: list[float] = []
        self.disk = Disk(self.rt.run_dir / "output")

    # --- the runtime's lives ---------------------------------------------------

    def start_runtime(self) -> None:
        life = Life(len(self.lives) + 1, self.root / "traces" / f"trace-{len(self.lives) + 1}.jsonl")
        self.rt.trace_file = life.trace
        self.rt.start()
        assert self.rt.proc is not None
        life.pid = self.rt.proc.pid
        self.lives.append(life)
        self.client = self.rt.client(timeout_s=30)
        self.sub = zmq.Context.instance().socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.connect(endpoints.telemetry(self.rt.run_dir))
        # Subscriptions take effect asynchronously: wait for a published message
        # before submitting, so no event of ours is missed.
        wait_until(lambda: self.sub.poll(100), 30, "the first published message")
        life.fds_idle = hygiene.open_fds(life.pid)
        held = hygiene.held_back(self.rt.run_dir)
        if held:
            self.fail(f"life {life.number}: held back right after start: {held}")

    def end_runtime(self, how: str) -> None:
        """End the current life (SIGKILL, SIGTERM, or the final SIGTERM) and check it."""
        life = self.lives[-1]
        life.ended_by = how
        assert self.client is not None and self.sub is not None
        self.end_floods()
        self.drain_events(0.0)
        self.client.close()
        self.sub.close()
        life.killed_at = time.time()
        code = self.rt.stop(signal.SIGKILL if how == "sigkill" else signal.SIGTERM)
        if how != "sigkill" and code != 0:
            self.fail(f"life {life.number}: runtime exited with {code} on SIGTERM")
        self.account_for(life)
        if how == "sigkill":  # the watchdog thaws, reopens, ends the tenants and removes what it left
            try:
                wait_until(lambda: not hygiene.leftovers(self.rt.run_dir, self.rt.lock_dir, self.before),
                           WATCHDOG_BOUND_S, "the watchdog to leave nothing", 0.2)
            except AssertionError:
                left = hygiene.leftovers(self.rt.run_dir, self.rt.lock_dir, self.before)
                self.fail(f"life {life.number} (SIGKILL): the watchdog left {left}")
        else:
            for line in hygiene.leftovers(self.rt.run_dir, self.rt.lock_dir, self.before):
                self.fail(f"life {life.number} (SIGTERM): left {line}")
        for gpu in self.in_flight.values():
            gpu.clear()
        self.holding.clear()

    def restart(self, how: str) -> None:
        self.faults[f"restart_{how}"] += 1
        previous = self.lives[-1]
        self.end_runtime(how)
        self.start_runtime()
        if how == "sigkill":
            self.check_recovered(previous)

    def check_recovered(self, life: Life) -> None:
        """After a SIGKILL: the new start thawed what was frozen and ended the old tenants."""
        started = [e for e in read_trace(self.lives[-1].trace).events if e["type"] == "runtime_started"]
        recovered = started[0].get("recovered", []) if started else []
        # Only the commands in flight at the kill, and only the processes that
        # existed then: pids are reused (pid_max is often 32768).
        pids = [self.commands[c].pid for c in life.commands if self.commands[c].outcome == "ended by restart"]

        def survivors() -> list[int]:
            return [p for p in pids if hygiene.alive(p) and started_before(p, life.killed_at)]

        try:
            wait_until(lambda: not survivors(), 30, "the killed runtime's tenants to end", 0.2)
        except AssertionError:
            self.fail(f"life {life.number}: tenants still alive after the restart: {survivors()}")
        self.recovered_lines.extend(recovered)

    def account_for(self, life: Life) -> None:
        for line in account(life, self.commands):
            self.fail(line)

    # --- load and faults ----------------------------------------------------------

    def submit(self, gpu: int, argv: list[str], kind: str, timeout_s: float | None = None) -> Command | None:
        assert self.client is not None
        body: dict[str, Any] = {"argv": argv, "gpu": gpu, "label": f"soak-{kind}"}
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        try:
            command_id = self.client.call("submit", body)["id"]
        except (RequestFailed, RuntimeUnavailable) as exc:
            self.refused += 1
            self.fail(f"submit refused: {exc}")
            return None
        cmd = Command(command_id, gpu, kind, len(self.lives))
        self.commands[command_id] = cmd
        self.lives[-1].commands.append(command_id)
        self.in_flight[gpu].add(command_id)
        return cmd

    def top_up(self) -> None:
        for gpu, ids in self.in_flight.items():
            load = sum(1 for c in ids if self.commands[c].kind == "load")
            for _ in range(self.args.tenants - load):
                self.submit(gpu, regions_tenant(self.rng.randint(1, 3), self.args.pause_ms), "load")

    def inject(self, kind: str) -> None:
        gpu = self.rng.randrange(self.args.gpus)
        if kind in RESTART_FAULTS:
            self.restart(kind.removeprefix("restart_"))
            return
        if kind == "fill_disk" and not self.disk.available:
            self.faults["fill_disk (no tmpfs here)"] += 1
            return
        self.faults[kind] += 1
        if kind == "fill_disk":
            self.disk.fill()
        elif kind in ("read_only_flood", "channel_flood"):
            flood = Flood(kind, self.rt.run_dir)
            flood.start()
            self.floods.append(flood)
        elif kind == "kill_in_region":
            cmd = self.submit(gpu, regions_tenant(1, 0, hold_s=HOLD_LIMIT_S * 0.8), kind)
            if cmd is not None:
                cmd.kill_on_grant = True
        elif kind == "hang_past_hold_limit":
            self.submit(gpu, regions_tenant(1, 0, hold_s=HOLD_LIMIT_S + 1.0), kind)
        elif kind == "hang_past_timeout":
            self.submit(gpu, regions_tenant(1, 0, hold_s=1000), kind, timeout_s=HOLD_LIMIT_S + 1.5)
        else:
            running = [c for c in self.in_flight[gpu] if self.commands[c].kind == "load" and self.commands[c].pid]
            outside = [c for c in running if c not in self.holding.values()]
            victims = outside if kind == "kill_outside_region" else running
            if not victims:
                self.faults[f"{kind} (no target)"] += 1
                return
            victim = self.commands[self.rng.choice(victims)]
            victim.kind = kind
            if kind == "cancel":
                try:
                    assert self.client is not None
                    self.client.call("cancel", {"id": victim.id})
                except RequestFailed:
                    pass  # it ended meanwhile
            else:
                kill(victim.pid)

    def end_floods(self, wait: bool = True) -> None:
        """Collect the floods that ended (all of them, stopping them, with `wait`)."""
        for flood in list(self.floods):
            if wait:
                flood.stop.set()
                flood.join()
            elif flood.is_alive():
                continue
            self.floods.remove(flood)
            if flood.problem:
                self.fail(flood.problem)
            if flood.status_s is not None:
                self.flood_status_s.append(flood.status_s)

    def drain_events(self, timeout_s: float) -> None:
        """Follow the runtime's events: starts (pids), region grants (kills in
        regions), ends (a slot frees up)."""
        assert self.sub is not None
        while self.sub.poll(int(timeout_s * 1000)):
            timeout_s = 0.0
            topic, payload = self.sub.recv_multipart()
            if topic != protocol.TOPIC_EVENT:
                continue
            event = json.loads(payload)
            cmd = self.commands.get(event.get("id") or event.get("command_id") or "")
            kind = event["type"]
            if kind == "region_granted":
                self.holding[event["gpu"]] = event.get("command_id", "")
                if cmd is not None and cmd.kill_on_grant:
                    kill(cmd.pid)
            elif kind == "region_released":
                self.holding.pop(event["gpu"], None)
            elif cmd is None:
                continue
            elif kind == "command_started":
                cmd.pid = event["pid"]
            elif kind == "command_finished":
                self.in_flight[cmd.gpu].discard(cmd.id)

    def sample(self) -> None:
        life = self.lives[-1]
        try:
            rss = psutil.Process(life.pid).memory_info().rss
            fds = len(hygiene.open_fds(life.pid))
        except (psutil.Error, OSError):
            return
        running = sum(len(v) for v in self.in_flight.values())
        self.rss.append({"t_s": round(time.monotonic() - self.t0, 1), "life": life.number, "rss_kib": rss // 1024,
                         "fds": fds, "in_flight": running})
        self.fd_samples.append(fds)

    def fail(self, line: str) -> None:
        print(f"  FAIL: {line}", file=sys.stderr, flush=True)
        self.failures.append(line)

    # --- the run ------------------------------------------------------------------------

    def run(self) -> None:
        self.disk.mount()
        self.start_runtime()
        end = self.t0 + self.args.duration
        # Every kind of fault once early (so a short run covers them all), then at random.
        first = list(TENANT_FAULTS + NODE_FAULTS + RESTART_FAULTS)
        self.rng.shuffle(first)
        next_fault = time.monotonic() + self.args.fault_every
        next_sample = time.monotonic()
        while time.monotonic() < end:
            self.top_up()
            self.drain_events(0.2)
            now = time.monotonic()
            if now >= next_fault:
                if first:
                    kind = first.pop()
                else:
                    weights = ([1.0] * len(TENANT_FAULTS) + [self.args.node_weight] * len(NODE_FAULTS)
                               + [self.args.restart_weight] * len(RESTART_FAULTS))
                    kind = self.rng.choices(TENANT_FAULTS + NODE_FAULTS + RESTART_FAULTS, weights)[0]
                self.inject(kind)
                gap = self.args.fault_every if first else self.rng.expovariate(1 / self.args.fault_every)
                next_fault = time.monotonic() + gap
            if now >= next_sample:
                self.sample()
                next_sample = now + self.args.sample_every
            if self.disk.full_until and now >= self.disk.full_until:
                self.disk.free()
            self.end_floods(wait=False)
        if first:
            self.fail(f"the run ended before every kind of fault was injected (not: {first}); "
                      "run longer or lower --fault-every")
        self.finish()

    def finish(self) -> None:
        """Let the load end, check idleness and descriptors, stop, check everything."""
        life = self.lives[-1]
        self.disk.free()
        self.end_floods()
        deadline = time.monotonic() + 60
        while any(self.in_flight.values()) and time.monotonic() < deadline:
            self.drain_events(0.5)
        left = [c for ids in self.in_flight.values() for c in ids]
        if left:
            self.fail(f"commands still running 60 s after the load stopped: {left}")
        try:
            wait_until(lambda: not hygiene.held_back(self.rt.run_dir), 30, "nothing held back", 0.2)
        except AssertionError:
            self.fail(f"held back while idle: {hygiene.held_back(self.rt.run_dir)}")
        try:
            wait_until(lambda: not hygiene.grown_fds(life.pid, life.fds_idle), 30, "descriptors back", 0.2)
        except AssertionError:
            self.fail(f"life {life.number}: descriptors grew: {hygiene.grown_fds(life.pid, life.fds_idle)}")
        self.sample()
        self.end_runtime("end")
        remove_device(self.rt.device)
        # Output files leave with the history: the last life keeps at most its last KEEP_FINISHED commands'.
        own = set(life.commands)
        self.output_files = sum(1 for f in (self.rt.run_dir / "output").iterdir() if f.stem in own)
        if self.output_files > 2 * KEEP_FINISHED:
            self.fail(f"life {life.number}: {self.output_files} output files kept (history: {KEEP_FINISHED} commands)")

    # --- results --------------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        rss = rss_summary(self.rss, self.args.rss_slope_span)
        if rss["slope_kib_per_min"] is not None and rss["slope_kib_per_min"] > self.args.rss_slope_limit:
            self.fail(f"RSS grows {rss['slope_kib_per_min']:.0f} KiB/min in life {rss['slope_life']} "
                      f"(limit {self.args.rss_slope_limit})")
        return {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.node()}, {os.cpu_count()} CPUs, simulated GPUs",
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "duration_s": round(time.monotonic() - self.t0, 1),
            "gpus": self.args.gpus,
            "tenants_per_gpu": self.args.tenants,
            "runtime_starts": len(self.lives),
            "submitted": len(self.commands),
            **tallies(self.commands.values()),
            "faults": dict(sorted(self.faults.items())),
            "flood_status_s": {"count": len(self.flood_status_s),
                               "max": round(max(self.flood_status_s), 3) if self.flood_status_s else None},
            "recovered": dict(Counter(line.split()[0] for line in self.recovered_lines)),
            "fds": {"start": self.fd_samples[0], "max": max(self.fd_samples), "end": self.fd_samples[-1]}
            if self.fd_samples else {},
            "output_files_last_life": self.output_files,
            "rss": rss,
            "rss_samples": self.rss,
            "failures": self.failures,
            "ok": not self.failures,
        }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    p.add_argument("--minutes", type=float, help="minutes of load (instead of --duration)")
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--tenants", type=int, default=16, help="commands kept in flight per GPU")
    p.add_argument("--pause-ms", type=float, default=6000, help="a load tenant sleeps up to this before each region")
    p.add_argument("--fault-every", type=float, default=4.0, help="mean seconds between faults")
    p.add_argument("--restart-weight", type=float, default=0.02,
                   help="weight of each restart kind against 1 per tenant fault")
    p.add_argument("--node-weight", type=float, default=0.3,
                   help="weight of each flood and of the filling disk against 1 per tenant fault")
    p.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS samples")
    p.add_argument("--rss-slope-limit", type=float, default=256.0, help="KiB per minute")
    p.add_argument("--rss-slope-span", type=float, default=3.0,
                   help="minutes the measured half of a life must span for the slope to be checked")
    p.add_argument("--seed", type=int, default=20261129)
    p.add_argument("--root", help="keep the run's folders here (default: a temporary folder)")
    p.add_argument("--json", metavar="FILE", help="write the result here")
    args = p.parse_args()
    if args.minutes is not None:
        args.duration = args.minutes * 60
    with tempfile.TemporaryDirectory(prefix="krex-soak-") as tmp:
        root = Path(args.root) if args.root else Path(tmp)
        soak = Soak(args, root)
        try:
            soak.run()
        finally:
            if soak.rt.proc is not None and soak.rt.proc.poll() is None:
                soak.rt.stop()
            disk = soak.disk.available
            soak.disk.unmount()
        result = soak.result() | {"disk": "tmpfs" if disk else "none"}
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
