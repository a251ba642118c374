"""Node overview: one row per GPU, keyed by its UUID (nvitop's device panel)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from krex_console import format as fmt
from krex_console.messages import GpuHighlighted, OpenGpu
from krex_console.model import ConsoleModel, gpu_by_uuid, gpu_figures, holder_short, inflation_of, tenants_of
from krex_console.views.bindings import GPU_ACTION_BINDINGS, ActionGate, GpuActions
from krex_console.views.columns import Column, Row
from krex_console.views.table_sync import FittedTable, selected_key
from krex_runtime.wire.state.model import GpuState

# Priorities: what an 80x24 terminal must show first (which GPU, who holds
# it, how busy it is, how trustworthy its timings are), what a wider one adds.
COLUMNS = [  # priorities: who holds and who is held back (frozen, parked, draining, leased) first, at 80 columns too
    Column("gpu", "GPU", 0, hotkey="G"),
    Column("holder", "Holder", 1, cap=12, hotkey="H", least=8),
    Column("hold", "Hold", 4, hotkey="O", least=7),
    Column("region_queue", "RQ", 2, hotkey="R"),
    Column("admission_queue", "AQ", 5, hotkey="A"),
    Column("running", "Run", 0, hotkey="U", least=6),
    Column("parked", "Park", 2, hotkey="P"),
    Column("draining", "Drain", 2, hotkey="N"),
    Column("frozen", "Frz", 1, hotkey="F"),
    Column("lease", "Lease", 1, hotkey="L", least=8),
    Column("admission", "Admit", 3, hotkey="D", least=6),  # least: "paused" never widens it (no rebuild)
    Column("inflation", "Infl p50/p95", 2, hotkey="I"),
    Column("util", "Util", 5, hotkey="T"),
    Column("memory", "Memory", 6, hotkey="M", least=7),
    Column("sm_clock", "SM", 7, hotkey="S", least=7),
    Column("temp", "Temp", 8, hotkey="E"),
    Column("name", "Device", 10, flex=True, hotkey="V"),
]


def with_spark(text: str, samples: list[float | None]) -> Text:
    if text == fmt.NA:
        return Text(fmt.NA, style="dim")
    spark = fmt.sparkline(samples, 6)
    return Text.assemble(text, " ", (spark, "cyan")) if spark else Text(text)


def gpu_row(model: ConsoleModel, gpu: GpuState) -> Row:
    f = gpu_figures(model.state, gpu, model.now)
    h = model.history
    estimate = inflation_of(gpu)
    telemetry = getattr(gpu, "telemetry", None)
    flagged = bool(fmt.get(estimate, "flagged"))
    p50, p95 = fmt.get(estimate, "inside_p50"), fmt.get(estimate, "inside_p95")
    if fmt.number(p50) is None and fmt.number(p95) is None:
        inflation = Text(fmt.NA, style="dim")
    else:
        inflation = Text(f"{fmt.inflation_short(p50)}/{fmt.inflation_short(p95)}", style="bold red" if flagged else "")
    tenants, _ = tenants_of(model.state, gpu)
    hold = model.now - gpu.region_since if gpu.region_since is not None else None
    cells = {
        "gpu": str(gpu.index),
        "holder": Text(holder_short(gpu), style="bold yellow" if gpu.region_holder is not None else "dim"),
        "hold": f["hold"],
        "region_queue": f["region_queue"],
        "admission_queue": f["admission_queue"],
        "running": f["running"],
        "parked": Text(f["parked"], style="dim" if f["parked"] == fmt.NA else ""),
        "draining": Text(f["draining"], style="dim" if f["draining"] == fmt.NA else ""),
        "frozen": Text(f["frozen"], style="bold cyan" if gpu.frozen else ""),
        "lease": Text(f["lease"], style="bold magenta" if f["lease"] != "-" else "dim"),
        "admission": Text(f["admission"], style="bold red" if f["admission"] != "open" else "green"),
        "inflation": inflation,
        "util": with_spark(f["util"], h.values(gpu.uuid, "util_pct")),
        "memory": fmt.memory_short(fmt.get(telemetry, "mem_used"), fmt.get(telemetry, "mem_total")),
        "sm_clock": f["sm_clock"],
        "temp": f["temp"],
        "name": f"{gpu.name}{' (sim)' if gpu.simulated else ''}{' (AMD)' if gpu.vendor == 'amd' else ''}",
    }
    order = {
        "gpu": gpu.index, "hold": hold, "region_queue": len(gpu.region_queue), "admission_queue": gpu.queued,
        "running": tenants, "frozen": len(gpu.frozen), "inflation": fmt.number(p95),
        "util": fmt.number(fmt.get(telemetry, "util_pct")), "memory": fmt.number(fmt.get(telemetry, "mem_used")),
        "sm_clock": fmt.number(fmt.get(telemetry, "sm_clock_mhz")), "temp": fmt.number(fmt.get(telemetry, "temp_c")),
        "parked": getattr(gpu, "parked", None), "draining": getattr(gpu, "draining", None),
    }
    return Row(gpu.uuid, cells, order)


class OverviewTable(GpuActions, FittedTable):
    COLUMNS = COLUMNS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Open"), *GPU_ACTION_BINDINGS]

    def __init__(self, model: ConsoleModel, gate: ActionGate) -> None:
        super().__init__(id="overview-table")
        self.model = model
        self.gate = gate

    def refresh_from(self, model: ConsoleModel) -> None:
        self.show([gpu_row(model, gpu) for gpu in model.state.gpus.values()])
        self.offer_actions()

    def selected_gpu(self) -> GpuState | None:
        uuid = selected_key(self)
        return gpu_by_uuid(self.model.state, uuid) if uuid else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_gpu()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.offer_actions()
        gpu = self.selected_gpu()
        self.post_message(GpuHighlighted(gpu.uuid if gpu is not None else None))

    def action_open_gpu(self) -> None:
        gpu = self.selected_gpu()
        if gpu is not None:
            self.post_message(OpenGpu(gpu.uuid))

