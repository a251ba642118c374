"""GPU detail: one GPU's figures, its tenants, and a timeline of recent regions."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label, Static

from krex_console import format as fmt
from krex_console.feed import RegionRecord
from krex_console.model import ConsoleModel, gpu_by_uuid, gpu_figures, tenant_state
from krex_console.views.bindings import GPU_ACTION_BINDINGS, ActionGate, GpuActions
from krex_console.views.table_sync import sync_rows
from krex_console.widgets import StatusBar
from krex_runtime.wire.state import GpuState

TIMELINE_ROWS = 50
BAR_WIDTH = 12


def describe_gpu(model: ConsoleModel, gpu: GpuState) -> str:
    f = gpu_figures(model.state, gpu, model.now)
    t = getattr(gpu, "telemetry", None)
    canary = getattr(gpu, "canary", None)
    pool = getattr(gpu, "pool", None)
    throttle = fmt.get(t, "throttle")
    sim = fmt.get(t, "simulated")
    lines = [
        f"[b]GPU {gpu.index}[/b]  {gpu.uuid}  {gpu.name}{'  [i](simulated)[/i]' if gpu.simulated else ''}"
        f"  memory {fmt.bytes_(gpu.memory_total)}  cpus {','.join(map(str, gpu.cpus)) or fmt.NA}",
        f"region holder {f['holder']}  hold {f['hold']}  region queue {f['region_queue']}"
        f"  admission queue {f['admission_queue']}  lease {f['lease']}  admission {f['admission']}",
        f"running {f['running']}  parked {f['parked']}  draining {f['draining']}  frozen {f['frozen']}"
        f" {gpu.frozen if gpu.frozen else ''}  started {gpu.started}  finished {gpu.finished}"
        f"  regions {gpu.regions_granted}{verdict_text(gpu)}{foreign_text(t)}",
        f"inflation inside p50/p95 {f['inflation_p50']}/{f['inflation_p95']}"
        f"  outside p50/p95 {fmt.inflation(fmt.get(canary, 'outside_p50'))}/{fmt.inflation(fmt.get(canary, 'outside_p95'))}"
        f"  contention {fmt.factor(fmt.get(canary, 'contention'))}"
        f"  flagged {fmt.get(canary, 'flagged') if fmt.get(canary, 'flagged') is not None else fmt.NA}",
        f"util {f['util']}  memory {f['memory']}  SM {f['sm_clock']}"
        f"  mem clock {fmt.value(fmt.get(t, 'mem_clock_mhz'), 'MHz')}  temp {f['temp']}"
        f"  power {fmt.value(fmt.get(t, 'power_w'), 'W')}"
        f"  throttle {', '.join(throttle) if isinstance(throttle, list) and throttle else ('none' if isinstance(throttle, list) else fmt.NA)}"
        f"{'  [i](simulated telemetry)[/i]' if sim else ''}",
        "pool " + pool_text(pool) + share_text(gpu),
    ]
    return "\n".join(lines)


def summarize_gpu(model: ConsoleModel, gpu: GpuState) -> str:
    """The overview's panel for the highlighted GPU: what its row has no room for."""
    t = getattr(gpu, "telemetry", None)
    canary = getattr(gpu, "canary", None)
    pool = getattr(gpu, "pool", None)
    throttle = fmt.get(t, "throttle")
    holder_cmd = f"  command {gpu.region_command}" if gpu.region_command else ""
    return "\n".join([
        f"[b]GPU {gpu.index}[/b]  {gpu.uuid}  {gpu.name}{'  [i](simulated)[/i]' if gpu.simulated else ''}{holder_cmd}"
        f"  frozen {','.join(f't{x}' for x in gpu.frozen) or '-'}",
        f"canary outside p50/p95 {fmt.inflation(fmt.get(canary, 'outside_p50'))}/"
        f"{fmt.inflation(fmt.get(canary, 'outside_p95'))}  contention {fmt.factor(fmt.get(canary, 'contention'))}"
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


def region_row(model: ConsoleModel, r: RegionRecord, longest: float) -> list[Any]:
    s = r.stats
    hold = s.get("hold_s")
    if hold is None and r.released_t is None:
        hold = model.now - r.granted_t  # still held
    who = "operator" if r.kind == "lease" and r.tenant_id == 0 else f"t{r.tenant_id}"
    cmd = model.state.commands.get(r.command_id) if r.command_id else None
    if cmd is not None and cmd.label:
        who += f" {cmd.label}"
    filled = int(round((fmt.number(hold) or 0.0) / longest * BAR_WIDTH)) if longest > 0 else 0
    bar = Text("█" * filled, style="yellow" if r.released_t is None else "green")
    return [
        str(r.region),
        f"{fmt.duration(model.now - r.granted_t)} ago",
        who,
        r.kind,
        fmt.duration(s.get("wait_s")),
        fmt.duration(s.get("drain_s")),
        fmt.duration(s.get("freeze_s")),
        fmt.duration(s.get("enter_s")),
        Text.assemble(fmt.duration(hold), " ", bar),
        fmt.duration(s.get("thaw_s")),
        ",".join(map(str, r.frozen)) or "-",
        r.reason or ("holding" if r.released_t is None else ""),
    ]


class GpuDetailScreen(GpuActions, Screen[None]):
    """Opened from the overview; keyed by UUID, so it follows the same GPU
    whatever order the rows are in. Esc goes back."""

    DEFAULT_CSS = """
    GpuDetailScreen #gpu-summary { height: auto; padding: 0 1; border: round $accent; }
    GpuDetailScreen DataTable { height: 1fr; }
    GpuDetailScreen Label { padding: 0 1; text-style: bold; }
    """
    BINDINGS = [Binding("escape", "back", "Back"), *GPU_ACTION_BINDINGS]

    def __init__(self, uuid: str, model: ConsoleModel, gate: ActionGate, status: str = "") -> None:
        super().__init__()
        self.uuid = uuid
        self.model = model
        self.gate = gate
        self.status = status  # the status bar's first text; the app keeps it current
        self._ready = False  # the app's refresh tick may come before on_mount has made the columns

    def compose(self) -> ComposeResult:
        yield StatusBar(self.status)
        with Vertical():
            yield Static(id="gpu-summary")
            yield Label("Tenants (running commands)")
            yield DataTable(id="tenants", cursor_type="row")
            yield Label("Recent regions (newest first): wait, drain, freeze, entry, hold, thaw")
            yield DataTable(id="regions", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        tenants = self.query_one("#tenants", DataTable)
        for key, label in (("id", "Command"), ("label", "Label"), ("tenant", "Tenant"), ("pid", "PID"),
                           ("state", "State"), ("age", "Running for"), ("argv", "Command line")):
            tenants.add_column(label, key=key)
        regions = self.query_one("#regions", DataTable)
        for key, label in (("region", "Region"), ("at", "Granted"), ("who", "Holder"), ("kind", "Kind"),
                           ("wait", "Wait"), ("drain", "Drain"), ("freeze", "Freeze"), ("enter", "Entry"),
                           ("hold", "Hold"), ("thaw", "Thaw"), ("frozen", "Frozen"), ("reason", "Reason")):
            regions.add_column(label, key=key)
        self._ready = True
        self.refresh_from(self.model)

    def refresh_from(self, model: ConsoleModel) -> None:
        if not self._ready:
            return
        gpu = gpu_by_uuid(model.state, self.uuid)
        summary = self.query_one("#gpu-summary", Static)
        if gpu is None:
            summary.update(f"GPU {self.uuid} is not in the node's state (yet)")
            return
        summary.update(describe_gpu(model, gpu))
        tenants = []
        for cid in gpu.running:
            cmd = model.state.commands.get(cid)
            if cmd is None:
                continue
            age = model.now - cmd.started_at if cmd.started_at is not None else None
            tenants.append((cid, [cid, cmd.label, f"t{cmd.tenant_id}", count_text(cmd.pid), tenant_state(gpu, cmd),
                                  fmt.duration(age), fmt.argv_text(cmd.argv, 50)]))
        sync_rows(self.query_one("#tenants", DataTable), tenants)
        records = model.log.regions_of_gpu(gpu.index)[-TIMELINE_ROWS:][::-1]
        longest = max((fmt.number(r.stats.get("hold_s")) or 0.0 for r in records), default=0.0)
        longest = max([longest] + [model.now - r.granted_t for r in records if r.released_t is None])
        sync_rows(self.query_one("#regions", DataTable),
                  [(str(r.region), region_row(model, r, longest)) for r in records])

    def selected_gpu(self) -> GpuState | None:
        return gpu_by_uuid(self.model.state, self.uuid)

    def action_back(self) -> None:
        self.app.pop_screen()

