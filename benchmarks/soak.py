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
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import zmq

from krex_runtime.sim.device_file import remove_device
from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import Runtime, wait_until
from krex_runtime.wire import endpoints, protocol
from krex_runtime.wire.control_client import ControlClient, RequestFailed, RuntimeUnavailable
from krex_runtime.wire.trace import TraceError, read_trace, replay

HERE = Path(__file__).resolve().parent
TENANTS = HERE.parent / "tests" / "tenants"
PY = sys.executable
HOLD_LIMIT_S = 1.5
KEEP_FINISHED = 200
TENANT_FAULTS = ("kill_in_region", "kill_outside_region", "hang_past_hold_limit", "hang_past_timeout", "cancel")
NODE_FAULTS = ("read_only_flood", "channel_flood", "fill_disk")  # fill_disk only where a tmpfs can be mounted
RESTART_FAULTS = ("restart_sigkill", "restart_sigterm")
FLOOD_S = 3.0  # how long each flood lasts
FLOOD_STATUS_BOUND_S = 10.0  # `status` must answer within this during a flood
CHANNEL_FLOOD_CONNECTIONS = 200
DISK_MIB = 16  # the output folder's tmpfs
DISK_FULL_S = 4.0  # how long it stays full
WATCHDOG_BOUND_S = 30.0  # after a SIGKILL, until the watchdog has left nothing behind


def regions_tenant(regions: int, pause_ms: float, hold_s: float = 0.0) -> list[str]:
    return [
        PY, str(TENANTS / "regions.py"), "--regions", str(regions), "--kernel-us", "300", "--repeats", "3",
        "--pause-ms", str(pause_ms), "--hold-s", str(hold_s),
    ]


class Flood(threading.Thread):
    """One flood for FLOOD_S: `snapshot` requests on the read-only socket that
    are never read, or region-channel connections that say nothing. Midway,
    `status` must answer within FLOOD_STATUS_BOUND_S; `problem` says if not."""

    def __init__(self, kind: str, run_dir: Path) -> None:
        super().__init__(daemon=True)
        self.kind, self.run_dir = kind, run_dir
        self.stop = threading.Event()
        self.sent = 0
        self.status_s: float | None = None
        self.problem = ""

    def run(self) -> None:
        checker = threading.Thread(target=self._check_status, daemon=True)
        checker.start()
        try:
            self._read_only() if self.kind == "read_only_flood" else self._channel()
        finally:
            checker.join()

    def _read_only(self) -> None:
        ctx = zmq.Context()
        socks = [ctx.socket(zmq.DEALER) for _ in range(4)]
        for s in socks:
            s.setsockopt(zmq.LINGER, 0)
            s.connect(endpoints.control_read_only(self.run_dir))
        frame = protocol.encode(protocol.request("snapshot"))
        deadline = time.monotonic() + FLOOD_S
        while not self.stop.is_set() and time.monotonic() < deadline:
            for s in socks:
                try:
                    s.send(frame, zmq.NOBLOCK)
                    self.sent += 1
                except zmq.Again:
                    time.sleep(0.0005)  # the runtime pushes back
        for s in socks:
            s.close(linger=0)
        ctx.term()

    def _channel(self) -> None:
        held = []
        for _ in range(CHANNEL_FLOOD_CONNECTIONS):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(str(self.run_dir / "region.sock"))
            except OSError:
                conn.close()
                continue
            held.append(conn)
            self.sent += 1
        self.stop.wait(FLOOD_S)
        for conn in held:
            conn.close()

    def _check_status(self) -> None:
        self.stop.wait(FLOOD_S / 3)
        t0 = time.monotonic()
        try:
            with ControlClient(endpoints.control(self.run_dir), timeout_s=FLOOD_STATUS_BOUND_S) as c:
                c.call("status")
            self.status_s = time.monotonic() - t0
        except (RuntimeUnavailable, RequestFailed) as exc:
            if not self.stop.is_set():  # a restart in the middle is no finding
                self.problem = f"{self.kind}: status did not answer within {FLOOD_STATUS_BOUND_S:g} s ({exc})"


class Disk:
    """The output folder on a small tmpfs of its own, which `fill` fills to
    the last byte and `free` empties again; `available` is False where no
    tmpfs can be mounted (not root), and the fault is then skipped."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.filler = where / "soak-filler"
        self.available = False
        self.full_until = 0.0

    def mount(self) -> None:
        if os.geteuid() != 0:
            return
        self.where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(self.where)],
                              capture_output=True)
        self.available = done.returncode == 0

    def fill(self) -> None:
        try:
            with open(self.filler, "ab") as f:
                while True:
                    f.write(b"\0" * (1 << 16))
                    f.flush()
        except OSError:
            pass  # full
        self.full_until = time.monotonic() + DISK_FULL_S

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)
        self.full_until = 0.0

    def unmount(self) -> None:
        if self.available:
            self.free()
            subprocess.run(["umount", "-l", str(self.where)], capture_output=True)
            self.available = False


@dataclass
class Command:
    id: str
    gpu: int
    kind: str  # "load" or the fault it carries
    life: int  # which runtime start it was submitted to
    pid: int | None = None
    outcome: str | None = None  # from the trace: state, exit code or signal
    output_lost: int = 0  # bytes its output files did not get (the disk was full)
    kill_on_grant: bool = False
    released: list[str] = field(default_factory=list)  # why each of its regions ended


@dataclass
class Life:
    """One start of the runtime: its trace, how it ended, its commands."""

    number: int
    trace: Path
    pid: int = 0
    ended_by: str = ""  # "sigkill", "sigterm", "end"
    commands: list[str] = field(default_factory=list)
    fds_idle: dict[int, str] = field(default_factory=dict)
    killed_at: float = 0.0  # time.time() of the signal that ended it


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
        self.client: ControlClient | None = None
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
        self.account(life)
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
            return [p for p in pids if hygiene.alive(p) and _started_before(p, life.killed_at)]

        try:
            wait_until(lambda: not survivors(), 30, "the killed runtime's tenants to end", 0.2)
        except AssertionError:
            self.fail(f"life {life.number}: tenants still alive after the restart: {survivors()}")
        self.recovered_lines.extend(recovered)

    def account(self, life: Life) -> None:
        """Every command of this life has its end in the life's trace (or the life was SIGKILLed)."""
        try:
            trace = read_trace(life.trace)
            replay(trace)
        except (TraceError, KeyError, ValueError) as exc:
            self.fail(f"life {life.number}: trace does not read or replay: {exc}")
            return
        queued = {e["id"] for e in trace.events if e["type"] == "command_queued"}
        finished = {e["id"]: e for e in trace.events if e["type"] == "command_finished"}
        granted = {}
        for e in trace.events:
            if e["type"] == "command_started" and e["id"] in self.commands:
                self.commands[e["id"]].pid = e["pid"]
            elif e["type"] == "region_granted" and e.get("command_id") in self.commands:
                granted[e["region"]] = self.commands[e["command_id"]]
            elif e["type"] == "region_released" and e["region"] in granted:
                granted.pop(e["region"]).released.append(e["reason"])
        for command_id in life.commands:
            cmd = self.commands[command_id]
            if command_id not in queued:
                self.fail(f"life {life.number}: command {command_id} was accepted but is not in the trace")
            elif command_id in finished:
                cmd.outcome = outcome_of(finished[command_id])
                cmd.output_lost = sum((finished[command_id].get("output_lost") or {}).values())
            elif life.ended_by == "sigkill":
                cmd.outcome = "ended by restart"
            else:
                self.fail(f"life {life.number}: command {command_id} ({cmd.kind}) has no end in the trace")
                cmd.outcome = "missing"
        if life.ended_by != "sigkill" and trace.events[-1]["type"] != "runtime_stopped":
            self.fail(f"life {life.number}: trace does not end with runtime_stopped")

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
                _kill(victim.pid)

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
                    _kill(cmd.pid)
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
        outcomes = Counter(c.outcome or "unknown" for c in self.commands.values())
        by_fault: dict[str, Counter[str]] = {}
        released: dict[str, Counter[str]] = {}
        for c in self.commands.values():
            if c.kind != "load":
                by_fault.setdefault(c.kind, Counter())[c.outcome or "unknown"] += 1
                for reason in c.released:
                    released.setdefault(c.kind, Counter())[reason.split(" (")[0]] += 1
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
            "outcomes": dict(outcomes.most_common()),
            "faults": dict(sorted(self.faults.items())),
            "output_lost": {"commands": sum(1 for c in self.commands.values() if c.output_lost),
                            "bytes": sum(c.output_lost for c in self.commands.values())},
            "flood_status_s": {"count": len(self.flood_status_s),
                               "max": round(max(self.flood_status_s), 3) if self.flood_status_s else None},
            "fault_outcomes": {k: dict(v) for k, v in sorted(by_fault.items())},
            "fault_region_ends": {k: dict(v) for k, v in sorted(released.items())},
            "recovered": dict(Counter(line.split()[0] for line in self.recovered_lines)),
            "fds": {"start": self.fd_samples[0], "max": max(self.fd_samples), "end": self.fd_samples[-1]}
            if self.fd_samples else {},
            "output_files_last_life": self.output_files,
            "rss": rss,
            "rss_samples": self.rss,
            "failures": self.failures,
            "ok": not self.failures,
        }


def outcome_of(event: dict[str, Any]) -> str:
    state = event["state"]
    if event.get("signal"):
        return f"{state} (signal {event['signal']})"
    if state == "finished":
        return f"finished (exit {event.get('exit_code')})"
    return state


def rss_summary(samples: list[dict[str, Any]], min_span_min: float) -> dict[str, Any]:
    """Start, max and end over the run and per life; the slope (least squares)
    over the second half of the longest life (the first half is its warm-up),
    where that half spans at least `min_span_min` minutes."""
    summary: dict[str, Any] = {"start_kib": None, "max_kib": None, "end_kib": None, "slope_kib_per_min": None,
                               "slope_life": None, "lives": {}}
    if not samples:
        return summary
    lives: dict[int, list[dict[str, Any]]] = {}
    for s in samples:
        lives.setdefault(s["life"], []).append(s)
    summary.update(start_kib=samples[0]["rss_kib"], max_kib=max(s["rss_kib"] for s in samples),
                   end_kib=samples[-1]["rss_kib"])
    summary["lives"] = {
        str(n): {"samples": len(own), "span_min": round((own[-1]["t_s"] - own[0]["t_s"]) / 60, 1),
                 "start_kib": own[0]["rss_kib"], "max_kib": max(s["rss_kib"] for s in own),
                 "end_kib": own[-1]["rss_kib"]}
        for n, own in lives.items()
    }
    longest = max(lives, key=lambda n: lives[n][-1]["t_s"] - lives[n][0]["t_s"])
    half = lives[longest][len(lives[longest]) // 2 :]
    ts = [s["t_s"] / 60 for s in half]
    if len(half) >= 3 and ts[-1] - ts[0] >= min_span_min:
        ys = [s["rss_kib"] for s in half]
        mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
        summary["slope_kib_per_min"] = sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / sum((t - mt) ** 2 for t in ts)
        summary["slope_life"] = longest
    return summary


def _started_before(pid: int | None, when: float) -> bool:
    try:
        return psutil.Process(pid).create_time() <= when
    except psutil.Error:
        return False


def _kill(pid: int | None) -> None:
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def print_table(r: dict[str, Any]) -> None:
    print(f"# soak — {r['machine']}, {r['gpus']} GPUs x {r['tenants_per_gpu']} tenants, {r['duration_s']:.0f} s, "
          f"{r['runtime_starts']} runtime start(s)")
    print(f"{'commands by outcome':<44} {'count':>7}")
    for outcome, n in r["outcomes"].items():
        print(f"  {outcome:<42} {n:>7}")
    print(f"  {'submitted':<42} {r['submitted']:>7}")
    print(f"{'faults injected':<44} {'count':>7}")
    for kind, n in r["faults"].items():
        outcomes = ", ".join(f"{k}: {v}" for k, v in r["fault_outcomes"].get(kind, {}).items())
        print(f"  {kind:<42} {n:>7}   {outcomes}")
        ends = ", ".join(f"{k}: {v}" for k, v in r["fault_region_ends"].get(kind, {}).items())
        if ends:
            print(f"  {'':<42} {'':>7}   regions ended: {ends}")
    rss, fds = r["rss"], r["fds"]
    slope = (f"{rss['slope_kib_per_min']:.1f} KiB/min (second half of life {rss['slope_life']})"
             if rss["slope_kib_per_min"] is not None else "n/a (no life long enough)")
    print(f"{'runtime RSS (KiB)':<44} start {rss['start_kib']}  max {rss['max_kib']}  end {rss['end_kib']}  "
          f"slope {slope}")
    for n, life in rss["lives"].items():
        print(f"  life {n:<37} {life['span_min']:>5} min  start {life['start_kib']}  max {life['max_kib']}  "
              f"end {life['end_kib']}")
    if fds:
        print(f"{'runtime descriptors':<44} start {fds['start']}  max {fds['max']}  end {fds['end']}")
    lost = r["output_lost"]
    print(f"{'output lost to the full disk':<44} {lost['commands']:>7} commands, {lost['bytes']} bytes "
          f"(disk: {r['disk']})")
    floods = r["flood_status_s"]
    print(f"{'status during floods':<44} {floods['count']:>7} answered, slowest {floods['max']} s")
    print(f"{'leaks and lost commands':<44} {len(r['failures']):>7}")
    for line in r["failures"][:20]:
        print(f"  {line}")
    print("RESULT:", "ok" if r["ok"] else "FAILED")


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
