"""Node overview: one row per GPU, keyed by its UUID (nvitop's device panel)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from krex_console import format as fmt
from krex_console.messages import GpuHighlighted, OpenGpu
from krex_console.model import ConsoleModel, gpu_by_uuid, gpu_figures
from krex_console.views.bindings import GPU_ACTION_BINDINGS, ActionGate, GpuActions
from krex_console.views.table_sync import selected_key, sync_rows
from krex_runtime.wire.state import GpuState

COLUMNS = [
    ("gpu", "GPU"),
    ("holder", "Region holder"),
    ("hold", "Hold"),
    ("region_queue", "RQ"),
    ("admission_queue", "AQ"),
    ("running", "Run"),
    ("parked", "Park"),
    ("draining", "Drain"),
    ("frozen", "Frz"),
    ("lease", "Lease"),
    ("admission", "Admit"),
    ("inflation", "Infl p50/p95"),
    ("util", "Util"),
    ("memory", "Memory"),
    ("sm_clock", "SM"),
    ("temp", "Temp"),
]


def with_spark(text: str, samples: list[float | None]) -> Text:
    if text == fmt.NA:
        return Text(fmt.NA, style="dim")
    spark = fmt.sparkline(samples, 6)
    return Text.assemble(text, " ", (spark, "cyan")) if spark else Text(text)


def gpu_row(model: ConsoleModel, gpu: GpuState) -> list[Any]:
    f = gpu_figures(model.state, gpu, model.now)
    h = model.history
    canary = getattr(gpu, "canary", None)
    flagged = bool(fmt.get(canary, "flagged"))
    if f["inflation_p50"] == fmt.NA and f["inflation_p95"] == fmt.NA:
        inflation = Text(fmt.NA, style="dim")
    else:
        inflation = Text(f"{f['inflation_p50']}/{f['inflation_p95']}", style="bold red" if flagged else "")
    holder = Text(f["holder"], style="bold yellow" if gpu.region_holder is not None else "dim")
    admission = Text(f["admission"], style="bold red" if f["admission"] != "open" else "green")
    lease = Text(f["lease"], style="bold magenta" if f["lease"] != "-" else "dim")
    frozen = Text(f["frozen"], style="bold cyan" if gpu.frozen else "")
    return [
        Text(f"{gpu.index} {fmt.short_uuid(gpu.uuid, 14)}"),
        holder,
        f["hold"],
        f["region_queue"],
        f["admission_queue"],
        f["running"],
        Text(f["parked"], style="dim" if f["parked"] == fmt.NA else ""),
        Text(f["draining"], style="dim" if f["draining"] == fmt.NA else ""),
        frozen,
        lease,
        admission,
        inflation,
        with_spark(f["util"], h.values(gpu.uuid, "util_pct")),
        with_spark(f["memory"], h.values(gpu.uuid, "mem_used")),
        with_spark(f["sm_clock"], h.values(gpu.uuid, "sm_clock_mhz")),
        with_spark(f["temp"], h.values(gpu.uuid, "temp_c")),
    ]


class OverviewTable(GpuActions, DataTable[Any]):
    BINDINGS = [Binding("enter", "select_cursor", "GPU detail"), *GPU_ACTION_BINDINGS]

    def __init__(self, model: ConsoleModel, gate: ActionGate) -> None:
        super().__init__(id="overview-table", cursor_type="row", zebra_stripes=True)
        self.model = model
        self.gate = gate

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def refresh_from(self, model: ConsoleModel) -> None:
        sync_rows(self, [(gpu.uuid, gpu_row(model, gpu)) for gpu in model.state.gpus.values()])

    def selected_gpu(self) -> GpuState | None:
        uuid = selected_key(self)
        return gpu_by_uuid(self.model.state, uuid) if uuid else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_gpu()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        gpu = self.selected_gpu()
        self.post_message(GpuHighlighted(gpu.uuid if gpu is not None else None))

    def action_open_gpu(self) -> None:
        gpu = self.selected_gpu()
        if gpu is not None:
            self.post_message(OpenGpu(gpu.uuid))

