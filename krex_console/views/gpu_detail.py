"""GPU detail: one GPU's figures, its tenants, and a timeline of recent regions."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Label, Static

from krex_console import format as fmt
from krex_console.event_log import RegionRecord
from krex_console.model import ConsoleModel, gpu_by_uuid, gpu_figures, holder_text, tenant_state
from krex_console.views.bindings import GPU_ACTION_BINDINGS, ActionGate, GpuActions
from krex_console.views.columns import Column, Row
from krex_console.views.table_sync import FittedTable
from krex_console.widgets import KeysFooter, StatusBar
from krex_runtime.wire.state.model import GpuState

TIMELINE_ROWS = 50
BAR_WIDTH = 12
RANGE_DASH = "\u2013"  # an en dash between a range's ends, as typeset


NARROW = 110  # below this many columns the GPU's panel says the same in short lines, one each


def describe_gpu(model: ConsoleModel, gpu: GpuState, width: int = 0) -> str:
    f = gpu_figures(model.state, gpu, model.now)
    t = getattr(gpu, "telemetry", None)
    canary = getattr(gpu, "canary", None)
    pool = getattr(gpu, "pool", None)
    throttle = fmt.get(t, "throttle")
    throttled = ", ".join(throttle) if isinstance(throttle, list) and throttle else (
        "none" if isinstance(throttle, list) else fmt.NA)
    sim = fmt.get(t, "simulated")
    if 0 < width < NARROW:
        return "\n".join(line for line in [
            f"[b]GPU {gpu.index}[/b]  {gpu.name}{'  AMD' if gpu.vendor == 'amd' else ''}"
            f"{'  [i](sim)[/i]' if gpu.simulated else ''}  {gpu.uuid}",
            f"holder {f['holder']}  hold {f['hold']}  RQ {f['region_queue']}  AQ {f['admission_queue']}"
            f"  lease {f['lease']}  admission {f['admission']}",
            f"running {f['running']}  parked {f['parked']}  draining {f['draining']}  frozen {f['frozen']}"
            f" {gpu.frozen if gpu.frozen else ''} regions {gpu.regions_granted}{verdict_text(gpu)}{foreign_text(t)}",
            f"inflation in {f['inflation_p50']}/{f['inflation_p95']}  out {fmt.inflation(fmt.get(canary, 'outside_p50'))}/"
            f"{fmt.inflation(fmt.get(canary, 'outside_p95'))}  contention {fmt.factor(fmt.get(canary, 'contention'))}",
            f"util {f['util']}  mem {fmt.memory_short(fmt.get(t, 'mem_used'), fmt.get(t, 'mem_total'))}"
            f"  SM {f['sm_clock']}  temp {f['temp']}  power {fmt.value(fmt.get(t, 'power_w'), 'W')}  throttle {throttled}",
            "pool " + pool_text(pool) + share_text(gpu),
            process_memory_text(model, t),
            isolation_text(gpu),
        ] if line)
    lines = [
        f"[b]GPU {gpu.index}[/b]  {gpu.uuid}  {gpu.name}{'  AMD' if gpu.vendor == 'amd' else ''}{'  [i](simulated)[/i]' if gpu.simulated else ''}"
        f"  memory {fmt.bytes_(gpu.memory_total)}  cpus {','.join(map(str, gpu.cpus)) or fmt.NA}",
        f"region holder {f['holder']}  hold {f['hold']}  region queue {f['region_queue']}"
        f"  admission queue {f['admission_queue']}  lease {f['lease']}  admission {f['admission']}",
        f"running {f['running']}  parked {f['parked']}  draining {f['draining']}  frozen {f['frozen']}"
        f" {gpu.frozen if gpu.frozen else ''}  started {gpu.started}  finished {gpu.finished}"
        f"  regions {gpu.regions_granted}{verdict_text(gpu)}{foreign_text(t)}",
        canary_line(canary, f, gpu.simulated),
        f"util {f['util']}  memory {f['memory']}  SM {f['sm_clock']}"
        f"  mem clock {fmt.value(fmt.get(t, 'mem_clock_mhz'), 'MHz')}  temp {f['temp']}"
        f"  power {fmt.value(fmt.get(t, 'power_w'), 'W')}"
        f"  throttle {throttled}"
        f"{'  [i](simulated telemetry)[/i]' if sim else ''}",
        "pool " + pool_text(pool) + share_text(gpu),
        process_memory_text(model, t),
    ]
    isolation = isolation_text(gpu)
    if isolation:
        lines.append(isolation)
    return "\n".join(lines)


PROCESSES_SHOWN = 6  # the GPU memory line names the biggest users; the rest are counted


def process_memory_text(model: ConsoleModel, telemetry: Any) -> str:
    """GPU memory per process, most first, as nvitop lists them: its pid, its
    command where it is one of the node's (id and label), else `foreign`."""
    entries = fmt.get(telemetry, "process_memory")
    if not isinstance(entries, list):
        return f"GPU memory by process {fmt.NA}"
    if not entries:
        return "GPU memory by process: none"
    by_pid = {c.pid: c for c in model.state.commands.values() if c.pid is not None and c.state == "running"}
    parts = []
    for entry in entries[:PROCESSES_SHOWN]:
        if not isinstance(entry, dict):
            continue
        pid = entry.get("pid")
        cmd = by_pid.get(pid) if isinstance(pid, int) else None
        who = f"{cmd.id}{' ' + cmd.label if cmd.label else ''}" if cmd is not None else (
            "[b]foreign[/b]" if entry.get("foreign") else "tenant")
        parts.append(f"pid {entry.get('pid')} {who} {fmt.bytes_(entry.get('mem_used'))}")
    more = f"  (+{len(entries) - PROCESSES_SHOWN} more)" if len(entries) > PROCESSES_SHOWN else ""
    return "GPU memory by process: " + "; ".join(parts) + more


def canary_line(canary: Any, f: dict[str, str], simulated: bool) -> str:
    """The canary's inflation estimate, labelled for what it is. `clock-flagged`
    counts samples taken while the SM clock was off its baseline or the GPU
    throttled; it says nothing of the inflation itself. On simulated GPUs a
    kernel is a host-timed sleep, so a busy host CPU (other tenants, the
    runtime freezing and thawing) lengthens some samples inside regions and
    out: their p95 reads like contention, their p50 does not."""
    flagged = fmt.get(canary, "flagged")
    text = (
        f"inflation inside p50/p95 {f['inflation_p50']}/{f['inflation_p95']}"
        f"  outside p50/p95 {fmt.inflation(fmt.get(canary, 'outside_p50'))}/{fmt.inflation(fmt.get(canary, 'outside_p95'))}"
        f"  contention {fmt.factor(fmt.get(canary, 'contention'))}"
        f"  clock-flagged {flagged if flagged is not None else fmt.NA}/{fmt.get(canary, 'samples') or 0}"
    )
    return text + (f"  [i]{SIMULATOR_NOTE}[/i]" if simulated else "")


SIMULATOR_NOTE = "(simulator: host CPU load shows as inflation)"


def summarize_gpu(model: ConsoleModel, gpu: GpuState) -> str:
    """The overview's panel for the highlighted GPU: what its row has no room for."""
    t = getattr(gpu, "telemetry", None)
    canary = getattr(gpu, "canary", None)
    pool = getattr(gpu, "pool", None)
    throttle = fmt.get(t, "throttle")
    holder = holder_text(model.state, gpu)
    holder_cmd = f"  holder {holder}{f' (command {gpu.region_command})' if gpu.region_command else ''}" if gpu.region_holder is not None else ""
    return "\n".join([
        f"[b]GPU {gpu.index}[/b]  {gpu.uuid}  {gpu.name}{'  AMD' if gpu.vendor == 'amd' else ''}{'  [i](simulated)[/i]' if gpu.simulated else ''}{holder_cmd}"
        f"  frozen {','.join(f't{x}' for x in gpu.frozen) or '-'}",
        f"canary outside p50/p95 {fmt.inflation(fmt.get(canary, 'outside_p50'))}/"
        f"{fmt.inflation(fmt.get(canary, 'outside_p95'))}  contention {fmt.factor(fmt.get(canary, 'contention'))}"
        f"{'  [i]' + SIMULATOR_NOTE + '[/i]' if gpu.simulated and canary else ''}",
        # Util, SM clock and temperature too: an 80-column row has no room for them.
        f"util {fmt.percent(fmt.get(t, 'util_pct'))}  memory {fmt.memory(fmt.get(t, 'mem_used'), fmt.get(t, 'mem_total'))}"
        f"  SM {fmt.value(fmt.get(t, 'sm_clock_mhz'), 'MHz')}  temp {fmt.value(fmt.get(t, 'temp_c'), 'C')}"
        f"  power {fmt.value(fmt.get(t, 'power_w'), 'W')}  mem clock {fmt.value(fmt.get(t, 'mem_clock_mhz'), 'MHz')}"
        f"  throttle {', '.join(throttle) if isinstance(throttle, list) and throttle else ('none' if isinstance(throttle, list) else fmt.NA)}",
        "pool " + pool_text(pool) + f"  regions {gpu.regions_granted}  started {gpu.started}  finished {gpu.finished}",
    ])


def verdict_text(gpu: GpuState) -> str:
    """The regions' exclusivity certificates: how many verified, and the last verdict."""
    verdicts = getattr(gpu, "verdicts", None) or {}
    if not verdicts:
        return ""
    last = (getattr(gpu, "last_region", None) or {}).get("verdict", fmt.NA)
    return f"  verified {verdicts.get('verified', 0)}/{sum(verdicts.values())} (last {last})"


def foreign_text(telemetry: Any) -> str:
    """GPU processes this runtime did not start (they count against every region)."""
    pids = fmt.get(telemetry, "foreign")
    return f"  [b]foreign pids {', '.join(map(str, pids))}[/b]" if isinstance(pids, list) and pids else ""


def share_text(gpu: GpuState) -> str:
    """Each fair-share key's share of the GPU's region time."""
    held = getattr(gpu, "share_region_s", None) or {}
    total = sum(held.values())
    if not total:
        return ""
    return "  region time " + "  ".join(f"{k} {v / total * 100:.0f}%" for k, v in sorted(held.items()))


def count_text(v: Any) -> str:
    return fmt.NA if v is None else str(v)


def pool_text(pool: Any) -> str:
    """The context pool in one line: "off" for a GPU without one."""
    if not isinstance(pool, dict):
        return fmt.NA
    if not pool.get("size"):
        return "off"
    return "  ".join(f"{k} {count_text(fmt.get(pool, k))}" for k in ("size", "idle", "busy", "warming", "replaced"))


def isolation_text(gpu: GpuState) -> str:
    """Forked mode's zygote and the context pool's replacements by cause, in
    one line ("" when the GPU has neither): why a context process was
    replaced (`state-changed: torch.backends.cuda.matmul.allow_tf32`)."""
    parts = []
    zygote = getattr(gpu, "zygote", None)
    if isinstance(zygote, dict) and zygote:
        state = str(zygote.get("state", fmt.NA))
        why = f" ({zygote.get('reason')})" if state in ("failed", "stopped") and zygote.get("reason") else ""
        parts.append(
            f"zygote {state}{why}  forks {count_text(zygote.get('forks'))}  restarts {count_text(zygote.get('restarts'))}"
        )
    pool = getattr(gpu, "pool", None)
    reasons = pool.get("reasons") if isinstance(pool, dict) else None
    if isinstance(pool, dict) and isinstance(reasons, dict) and reasons:
        parts.append("replaced " + ", ".join(f"{cause} {n}" for cause, n in sorted(reasons.items())))
        last = pool.get("last_replaced")
        if isinstance(last, dict) and last.get("reason"):
            parts.append(f"last: {last['reason']}")
    return "  ".join(parts)


def region_row(model: ConsoleModel, r: RegionRecord, longest: float) -> Row:
    s = r.stats
    hold = s.get("hold_s")
    if hold is None and r.released_t is None:
        hold = model.now - r.granted_t  # still held
    who = "operator" if r.kind == "lease" and r.tenant_id == 0 else f"t{r.tenant_id}"
    cmd = model.state.commands.get(r.command_id) if r.command_id else None
    if cmd is not None and cmd.label:
        who += f" {cmd.label}"
    filled = round((fmt.number(hold) or 0.0) / longest * BAR_WIDTH) if longest > 0 else 0
    bar = Text("█" * filled, style="yellow" if r.released_t is None else "green")
    cells = {
        "region": str(r.region),
        "at": f"{fmt.duration(model.now - r.granted_t)} ago",
        "who": who,
        "kind": r.kind,
        "wait": fmt.duration(s.get("wait_s")),
        "drain": fmt.duration(s.get("drain_s")),
        "freeze": fmt.duration(s.get("freeze_s")),
        "enter": fmt.duration(s.get("enter_s")),
        "hold": Text.assemble(f"{fmt.duration(hold):>7} ", bar),
        "thaw": fmt.duration(s.get("thaw_s")),
        "frozen": ",".join(map(str, r.frozen)) or "-",
        "verdict": Text(r.verdict or "-", style=fmt.VERDICT_STYLE.get(r.verdict, "dim")),
        "reason": r.reason or ("holding" if r.released_t is None else ""),
    }
    order = {"region": r.region, "at": -r.granted_t, "wait": s.get("wait_s"), "drain": s.get("drain_s"),
             "freeze": s.get("freeze_s"), "enter": s.get("enter_s"), "hold": hold, "thaw": s.get("thaw_s")}
    return Row(str(r.region), cells, order)


class TenantsTable(FittedTable):
    COLUMNS: ClassVar[list[Column]] = [
        Column("id", "Command", 0, hotkey="C"),
        Column("label", "Label", 2, cap=20, hotkey="L"),
        Column("tenant", "Tenant", 1, hotkey="T"),
        Column("pid", "PID", 3, hotkey="P"),
        Column("state", "State", 0, hotkey="S"),
        Column("age", "Running for", 1, hotkey="R"),
        Column("argv", "Command line", 2, flex=True, hotkey="O", least=24),
    ]


class RegionsTable(FittedTable):
    COLUMNS: ClassVar[list[Column]] = [
        Column("region", "Region", 0, hotkey="R"),
        Column("at", "Granted", 3, hotkey="G"),
        Column("who", "Holder", 0, cap=20, hotkey="H"),
        Column("kind", "Kind", 4, hotkey="K"),
        Column("wait", "Wait", 1, hotkey="W"),
        Column("drain", "Drain", 5, hotkey="D"),
        Column("freeze", "Freeze", 5, hotkey="F"),
        Column("enter", "Entry", 1, hotkey="E"),
        Column("hold", "Hold", 0, hotkey="O"),
        Column("thaw", "Thaw", 5, hotkey="T"),
        Column("frozen", "Frozen", 6, hotkey="Z"),
        Column("verdict", "Verdict", 1, hotkey="V"),
        Column("reason", "Reason", 2, flex=True, hotkey="N", least=10),
    ]


PLOTTED = (("inflation", "inflation p50", fmt.inflation_short), ("sm_clock_mhz", "SM clock", lambda v: fmt.value(v, "MHz")),
           ("queue", "queue depth", lambda v: fmt.value(v)))


def plot(model: ConsoleModel, gpu: GpuState, width: int) -> str:
    """The last minutes (model.HISTORY_LEN seconds at most) of the inflation
    estimate, the SM clock and the queue depth (region + admission), one line
    each: its range, its latest value and a sparkline scaled to its range, one
    column per second of node time, newest at the right."""
    lines = []
    span = max(10, width - 36)
    for series, name, text in PLOTTED:
        samples = model.history.values(gpu.uuid, series)[-span:]
        known = [v for v in samples if v is not None]
        if not known:
            lines.append(f"{name:<14}{fmt.NA}")
            continue
        spark = fmt.sparkline(samples, span)
        lines.append(f"{name:<14}{text(min(known)):>7} {RANGE_DASH} {text(max(known)):<8} now {text(known[-1]):<8}[cyan]{spark}[/]")
    return "\n".join(lines)


class GpuDetailScreen(GpuActions, Screen[None]):
    """Opened from the overview; keyed by UUID, so it follows the same GPU
    whatever order the rows are in. Esc goes back."""

    DEFAULT_CSS = """
    GpuDetailScreen #gpu-summary { height: auto; max-height: 50%; overflow-y: auto; padding: 0 1; border: round $accent; }
    GpuDetailScreen #gpu-plot { height: auto; padding: 0 1; }
    GpuDetailScreen DataTable { height: 1fr; }
    GpuDetailScreen Label { padding: 0 1; text-style: bold; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back"), *GPU_ACTION_BINDINGS]

    def __init__(self, uuid: str, model: ConsoleModel, gate: ActionGate, status: str = "") -> None:
        super().__init__()
        self.uuid = uuid
        self.model = model
        self.gate = gate
        self.status = status  # the status bar's first text; the app keeps it current
        self._ready = False  # the app's refresh tick may come before on_mount

    def compose(self) -> ComposeResult:
        yield StatusBar(self.status)
        with Vertical():
            yield Static(id="gpu-summary")
            yield Static(id="gpu-plot")
            yield Label("Tenants (running commands)")
            yield TenantsTable(id="tenants")
            yield Label("Recent regions (newest first): wait, drain, freeze, entry, hold, thaw")
            yield RegionsTable(id="regions")
        yield KeysFooter()

    def on_mount(self) -> None:
        self._ready = True
        self.refresh_from(self.model)

    def refresh_from(self, model: ConsoleModel) -> None:
        if not self._ready:
            return
        gpu = gpu_by_uuid(model.state, self.uuid)
        try:
            summary = self.query_one("#gpu-summary", Static)
        except NoMatches:  # a tick that lands while the screen is being taken down (the app exiting)
            return
        if gpu is None:
            summary.update(f"GPU {self.uuid} is not in the node's state (yet)")
            return
        summary.update(describe_gpu(model, gpu, self.size.width or self.app.size.width))
        self.query_one("#gpu-plot", Static).update(plot(model, gpu, self.size.width or self.app.size.width))
        tenants = []
        for cid in gpu.running:
            cmd = model.state.commands.get(cid)
            if cmd is None:
                continue
            age = model.now - cmd.started_at if cmd.started_at is not None else None
            cells = {"id": cid, "label": cmd.label, "tenant": f"t{cmd.tenant_id}", "pid": count_text(cmd.pid),
                     "state": tenant_state(gpu, cmd), "age": fmt.duration(age), "argv": fmt.command_text(cmd.argv)}
            tenants.append(Row(cid, cells, {"tenant": cmd.tenant_id, "pid": cmd.pid, "age": age}))
        self.query_one(TenantsTable).show(tenants)
        records = model.log.regions_of_gpu(gpu.index)[-TIMELINE_ROWS:][::-1]
        longest = max((fmt.number(r.stats.get("hold_s")) or 0.0 for r in records), default=0.0)
        longest = max([longest] + [model.now - r.granted_t for r in records if r.released_t is None])
        self.query_one(RegionsTable).show([region_row(model, r, longest) for r in records])
        self.offer_actions()

    def selected_gpu(self) -> GpuState | None:
        return gpu_by_uuid(self.model.state, self.uuid)

    def action_back(self) -> None:
        self.app.pop_screen()
