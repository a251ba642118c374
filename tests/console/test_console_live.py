"""The console against real runtimes on simulated GPUs: every view, every
action (confirmed, cancelled, refused), the feed's reconnect and folding."""

from __future__ import annotations

import threading
import time
from typing import Any

from console_helpers import (
    CANDIDATE,
    answer,
    cancelled_then_confirmed,
    confirm_dialog,
    live_app,
    rendered,
    run_async,
    screen_text,
    shown_actions,
    submit,
    wait_for,
)
from runtime_helpers import REPO
from textual.widgets import DataTable, Log

from krex_console import actions
from krex_console.app import FilterInput
from krex_console.dialogs import ConfirmDialog
from krex_console.feed import FeedStatus
from krex_console.views.command_list import CommandDetailScreen, CommandsTable
from krex_console.views.events import EventsTable
from krex_console.views.gpu_detail import GpuDetailScreen
from krex_console.views.overview import OverviewTable
from krex_console.views.table_sync import select_key, selected_key
from krex_runtime.testing.local_runtime import Runtime
from krex_runtime.wire.state import apply as node_state

TALKER = ["sh", "-c", "echo hello-from-tenant; echo oops >&2; exec sleep 3600"]  # ends when killed


def runtime_state(rt: Runtime) -> node_state.NodeState:
    with rt.client() as client:
        return node_state.from_snapshot(client.call("snapshot")["state"])


async def select_gpu(pilot: Any, uuid: str) -> None:
    table = pilot.app.query_one(OverviewTable)
    await wait_for(pilot, lambda: select_key(table, uuid), what=f"row {uuid}")
    await pilot.pause()


@run_async
async def _views(rt: Runtime) -> None:
    app = live_app(rt)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.status == FeedStatus.LIVE, what="the live feed")
        talker = submit(rt, TALKER, label="talker", gpu=1)
        for i in range(3):
            submit(rt, CANDIDATE, label=f"cand-{i}", gpu=0)
        await wait_for(pilot, lambda: app.model.state.totals.get("finished", 0) >= 3, 30, "3 candidates")
        await rendered(pilot)
        await _overview_and_gpu_details(pilot, app, talker)
        commands, cand = await _commands_and_events(pilot, app, talker)
        await _kill_and_recycle(pilot, app, rt, commands, cand, talker)


async def _overview_and_gpu_details(pilot: Any, app: Any, talker: str) -> None:
    """The overview's rows, then each GPU's detail: its regions, its tenants."""
    # Overview: one row per GPU, keyed by UUID.
    overview = app.query_one(OverviewTable)
    uuids = {g.index: g.uuid for g in app.model.state.gpus.values()}
    assert [k.value for k in overview.rows] == [uuids[0], uuids[1]]
    assert "● LIVE" in screen_text(app)

    # GPU detail of GPU 0: its recent regions, with their entry costs.
    await select_gpu(pilot, uuids[0])
    await pilot.press("enter")
    detail = await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen) and app.screen)
    assert detail.uuid == uuids[0]
    await rendered(pilot)
    regions = detail.query_one("#regions", DataTable)
    assert regions.row_count >= 3
    assert "Drain" in screen_text(app) and " cand-0 " in screen_text(app)
    await pilot.press("escape")
    # GPU detail of GPU 1: the talker is its tenant.
    await select_gpu(pilot, uuids[1])
    await pilot.press("enter")
    detail = await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen) and app.screen)
    await rendered(pilot)
    tenants = detail.query_one("#tenants", DataTable)
    assert [k.value for k in tenants.rows] == [talker]
    assert "running" in screen_text(app)
    await pilot.press("escape")
    assert app.screen is app.screen_stack[0]


async def _commands_and_events(pilot: Any, app: Any, talker: str) -> tuple[CommandsTable, str]:
    """The commands view (filter, sort, details), the events view: the table, a finished candidate."""
    # Commands: filter, sort, drill down to the output tail.
    await pilot.press("2")
    commands = await wait_for(pilot, lambda: app.query(CommandsTable).first() if app.query(CommandsTable) else None,
                              what="the commands view")
    await pilot.press("slash", *"talker")
    await rendered(pilot)
    assert [k.value for k in commands.rows] == [talker]
    await pilot.press("enter")  # keep the filter, back to the table
    assert commands.has_focus
    await pilot.press("enter")
    screen = await wait_for(pilot, lambda: isinstance(app.screen, CommandDetailScreen) and app.screen)
    log = screen.query_one(Log)
    await wait_for(pilot, lambda: "hello-from-tenant" in "\n".join(log.lines), what="the output tail")
    assert "oops" in "\n".join(log.lines)
    await pilot.press("escape", "escape")  # leave the detail, then clear the filter
    await rendered(pilot)
    assert commands.row_count == 4 and not app.query_one("#commands-filter", FilterInput).has_class("shown")
    await pilot.press("slash", *"state:fin gpu:0", "enter")
    await rendered(pilot)
    assert commands.row_count == 3
    await pilot.press("escape")
    await pilot.press("s")
    assert commands.sort_name == "state"
    await rendered(pilot)
    # A finished candidate's detail: its region statistics and its output file.
    cand = next(c.id for c in app.model.state.commands.values() if c.label == "cand-0")
    select_key(commands, cand)
    await pilot.press("enter")
    screen = await wait_for(pilot, lambda: isinstance(app.screen, CommandDetailScreen) and app.screen)
    await wait_for(pilot, lambda: screen.result is not None, what="the result record")
    await rendered(pilot)
    text = screen_text(app)
    assert "regions 1: hold" in text and ".stdout" in text
    await pilot.press("escape")

    # Events: the audit log, filterable.
    await pilot.press("3")
    await rendered(pilot)
    events = app.query_one(EventsTable)
    assert events.row_count >= 10
    await pilot.press("slash", *"region_granted", "enter")
    await rendered(pilot)
    kinds = {str(events.get_row(k)[2]) for k in events.rows}
    assert kinds == {"region_granted"} and events.row_count == 3
    await pilot.press("escape")
    return commands, cand


async def _kill_and_recycle(pilot: Any, app: Any, rt: Runtime, commands: CommandsTable, cand: str, talker: str) -> None:
    """Kill and recycle offered only where they apply; a kill confirmed, after a cancel."""
    # Kill is offered only for a command that has not ended.
    await pilot.press("2")
    await rendered(pilot)
    select_key(commands, cand)
    await rendered(pilot)
    assert "kill" not in shown_actions(app)
    await pilot.press("ctrl+k")
    await pilot.pause()
    assert not isinstance(app.screen, ConfirmDialog)
    # Recycle is not offered on a GPU without a context pool, and the
    # runtime's refusal is the one docs/console.md describes.
    await pilot.press("1")
    await rendered(pilot)
    assert "recycle" not in shown_actions(app) and "lease" in shown_actions(app)
    outcome = await actions.perform(app.control_endpoint, actions.recycle(app.model.state.gpus[0]))
    assert not outcome.ok and outcome.code == "refused"
    assert f"`refused`: {outcome.reason}" in (REPO / "docs" / "console.md").read_text()

    # Kill: the dialog names the command and defaults to Cancel.
    await pilot.press("2")
    await rendered(pilot)
    select_key(commands, talker)
    await rendered(pilot)
    assert "kill" in shown_actions(app)
    await cancelled_then_confirmed(pilot, "ctrl+k", f"Kill command {talker} (talker)?",
                                   lambda: runtime_state(rt).commands[talker].state == "running")
    await wait_for(pilot, lambda: runtime_state(rt).commands[talker].state == "cancelled", what="the kill")
    await wait_for(pilot, lambda: app.model.state.commands[talker].state == "cancelled")
    assert app.last_outcome is not None and app.last_outcome.ok


def test_every_view_against_a_live_runtime(make_runtime: Any) -> None:
    _views(make_runtime(policy="krex", slots=3))


@run_async
async def _gpu_actions(rt: Runtime) -> None:
    app = live_app(rt)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.status == FeedStatus.LIVE and app.model.state.gpus)
        await rendered(pilot)
        gpu1 = app.model.state.gpus[1]
        await select_gpu(pilot, gpu1.uuid)
        await wait_for(pilot, lambda: {"lease", "recycle", "toggle_admission"} <= shown_actions(app),
                       what="the GPU's actions")
        assert "release" not in shown_actions(app)  # nobody leased it
        # With every GPU action offered, an 80-column footer still has ? and q.
        await pilot.resize_terminal(80, 24)
        await rendered(pilot)
        footer = screen_text(app).splitlines()[-1]
        assert "l Lease" in footer and "c Recycle" in footer and "? Help" in footer and "q Quit" in footer, footer
        await pilot.resize_terminal(120, 40)
        await rendered(pilot)
        await _lease_and_release(pilot, app, rt, gpu1)
        await _pause_recycle_and_the_palette(pilot, app, rt, gpu1)


async def _lease_and_release(pilot: Any, app: Any, rt: Runtime, gpu1: Any) -> None:
    """A lease, cancelled then confirmed; its release from the detail screen; a stale release refused."""
    # Lease: Enter on the fresh dialog cancels; Tab + Enter leases.
    await cancelled_then_confirmed(pilot, "l", f"Lease GPU 1 ({gpu1.uuid})?",
                                   lambda: runtime_state(rt).gpus[1].region_holder is None)
    await wait_for(pilot, lambda: runtime_state(rt).gpus[1].region_kind == "lease", what="the lease")
    assert runtime_state(rt).gpus[1].region_holder == 0
    await wait_for(pilot, lambda: app.last_outcome is not None and app.last_outcome.ok)
    await wait_for(pilot, lambda: app.model.state.gpus[1].region_kind == "lease", what="the lease event")
    await rendered(pilot)
    assert "operator" in screen_text(app), screen_text(app)
    # Leased: Release is offered, Lease is not (the palette neither).
    assert "release" in shown_actions(app) and "lease" not in shown_actions(app)
    palette = [c.title for c in app.get_system_commands(app.screen)]
    assert not any(t.startswith("Lease GPU 1") for t in palette) and any(t.startswith("Release GPU 1") for t in palette)
    assert not any(t.startswith("Release GPU 0") for t in palette) and any(t.startswith("Lease GPU 0") for t in palette)

    # Release, from the GPU's detail screen this time.
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, GpuDetailScreen))
    await pilot.press("u")
    await confirm_dialog(pilot)
    assert f"Release GPU 1 ({gpu1.uuid})?" in screen_text(app)
    await answer(pilot, confirm=True)
    await wait_for(pilot, lambda: runtime_state(rt).gpus[1].region_holder is None, what="the release")

    # Released, it offers Lease again and no Release; a caller that asks
    # anyway (a stale palette entry) gets the runtime's error as an error toast.
    await wait_for(pilot, lambda: app.model.state.gpus[1].region_holder is None)
    await rendered(pilot)
    await wait_for(pilot, lambda: "release" not in shown_actions(app) and "lease" in shown_actions(app),
                   what="the bindings to follow the GPU's state")
    await pilot.press("u")
    await pilot.pause()
    assert not isinstance(app.screen, ConfirmDialog)
    app.last_outcome = None
    app.confirm_and_perform(actions.release(app.model.state.gpus[1]))
    await confirm_dialog(pilot)
    await answer(pilot, confirm=True)
    outcome = await wait_for(pilot, lambda: app.last_outcome)
    assert not outcome.ok and outcome.code == "not_found"
    assert any(n.severity == "error" and "not leased" in n.message for n in app._notifications)
    await pilot.press("escape")


async def _pause_recycle_and_the_palette(pilot: Any, app: Any, rt: Runtime, gpu1: Any) -> None:
    """Admission paused and resumed, contexts recycled, the palette's actions and the help."""
    # Pause and resume admission.
    await pilot.press("p")
    await confirm_dialog(pilot)
    assert f"Pause admission on GPU 1 ({gpu1.uuid})?" in screen_text(app)
    await answer(pilot, confirm=True)
    await wait_for(pilot, lambda: runtime_state(rt).gpus[1].paused, what="the pause")
    await wait_for(pilot, lambda: app.model.state.gpus[1].paused)
    await rendered(pilot)
    assert "paused" in screen_text(app)
    await pilot.press("p")
    await confirm_dialog(pilot)
    assert "Resume admission on GPU 1" in screen_text(app)
    await answer(pilot, confirm=True)
    await wait_for(pilot, lambda: not runtime_state(rt).gpus[1].paused, what="the resume")

    # Recycle: every context process of GPU 1 is replaced.
    app.last_outcome = None
    replaced_before = runtime_state(rt).gpus[1].pool.get("replaced", 0)
    await pilot.press("c")
    await confirm_dialog(pilot)
    assert f"Recycle contexts of GPU 1 ({gpu1.uuid})?" in screen_text(app)
    await answer(pilot, confirm=True)
    outcome = await wait_for(pilot, lambda: app.last_outcome)
    assert outcome.action.request == "recycle" and outcome.action.body == {"gpu": 1, "now": True}
    assert outcome.ok, outcome
    await wait_for(
        pilot, lambda: runtime_state(rt).gpus[1].pool.get("replaced", 0) > replaced_before, what="the recycle"
    )

    # The command palette offers the same actions, naming their GPU.
    await pilot.press("ctrl+p")
    await pilot.press(*"Lease GPU 0")
    await pilot.pause(0.5)
    await pilot.press("enter")
    await confirm_dialog(pilot)
    assert f"Lease GPU 0 ({app.model.state.gpus[0].uuid})?" in screen_text(app)
    await pilot.press("escape")
    await pilot.pause(0.2)
    assert runtime_state(rt).gpus[0].region_holder is None

    # Help, and Esc backs out of it.
    await pilot.press("question_mark")
    await pilot.pause()
    assert "recycle its contexts" in screen_text(app)
    await pilot.press("escape")


def test_gpu_actions_are_confirmed_then_performed(make_runtime: Any) -> None:
    _gpu_actions(make_runtime(policy="krex", extra_config="[pool]\nsize_per_gpu = 1\n"))


@run_async
async def _read_only(rt: Runtime) -> None:
    sleeper = submit(rt, ["sleep", "30"], label="sleeper")
    for app in (live_app(rt, read_only=True), live_app(rt, read_only=False)):
        # The second app asked for the writable socket but was pointed at the
        # read-only one: the runtime's hello says so and the actions go too.
        if not app.read_only:
            app.live.control = f"ipc://{rt.run_dir / 'control-ro.sock'}"
            app.control_endpoint = app.live.control
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda app=app: app.status == FeedStatus.LIVE and app.model.state.gpus and app.read_only)
            await rendered(pilot)
            assert "READ-ONLY" in screen_text(app)
            assert not shown_actions(app) & actions.CHANGING_ACTIONS
            for key in ("l", "u", "c", "p"):
                await pilot.press(key)
                await pilot.pause()
                assert not isinstance(app.screen, ConfirmDialog)
            await pilot.press("2")
            await rendered(pilot)
            select_key(app.query_one(CommandsTable), sleeper)
            await pilot.press("k")
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmDialog)
            assert "Lease" not in screen_text(app).splitlines()[-1]

    # The runtime's side: every changing request is refused on the read-only socket.
    state = runtime_state(rt)
    gpu0, cmd = state.gpus[0], state.commands[sleeper]
    read_only = f"ipc://{rt.run_dir / 'control-ro.sock'}"
    for plan in (actions.lease(gpu0), actions.release(gpu0), actions.toggle_admission(gpu0), actions.kill(cmd)):
        outcome = await actions.perform(read_only, plan)
        assert not outcome.ok and outcome.code == "refused", outcome
    assert not (await actions.perform(read_only, actions.recycle(gpu0))).ok
    after = runtime_state(rt)
    assert after.commands[sleeper].state == "running" and not after.gpus[0].paused
    assert after.gpus[0].region_holder is None


def test_read_only_hides_actions_and_the_runtime_refuses_them(make_runtime: Any) -> None:
    _read_only(make_runtime(policy="krex"))


@run_async
async def _reconnect(rt: Runtime) -> None:
    app = live_app(rt)
    assert app.live is not None
    app.live.stale_after_s = 0.8
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.status == FeedStatus.LIVE and app.model.state.pid)
        first_pid = app.model.state.pid
        snapshots = app.live.snapshots_taken
        await pilot.pause()
        threading.Thread(target=rt.stop).start()
        await wait_for(pilot, lambda: app.status in (FeedStatus.STALE, FeedStatus.DISCONNECTED), 15, "stale")
        await wait_for(pilot, lambda: app.status == FeedStatus.DISCONNECTED, 15, "disconnected")
        await rendered(pilot)
        assert "DISCONNECTED" in screen_text(app)
        await pilot.pause(0.2)
        rt.start()
        assert rt.proc is not None
        await wait_for(pilot, lambda: app.model.state.pid == rt.proc.pid and app.status == FeedStatus.LIVE,
                       20, "the new runtime's snapshot")
        assert app.model.state.pid != first_pid and app.live.snapshots_taken > snapshots
        submit(rt, ["true"])
        await wait_for(pilot, lambda: app.model.state.totals.get("finished", 0) == 1, what="events after reconnect")
        await rendered(pilot)
        assert "● LIVE" in screen_text(app)


def test_feed_reconnects_when_the_runtime_restarts(make_runtime: Any) -> None:
    _reconnect(make_runtime(policy="krex"))


def _toggle_admission(rt: Runtime, count: int, every_s: float) -> float:
    """Pause and resume GPU 0 `count` times (two events each); returns events/s."""
    with rt.client() as client:
        started = time.monotonic()
        for i in range(count):
            client.call("pause" if i % 2 == 0 else "resume", {"gpu": 0})
            if every_s:
                time.sleep(every_s)
        return count / (time.monotonic() - started)


@run_async
async def _fold(rt: Runtime) -> None:
    app = live_app(rt)
    assert app.live is not None
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.status == FeedStatus.LIVE and app.model.state.gpus)
        await rendered(pilot)
        overview = app.query_one(OverviewTable)
        rebuilt = []
        overview.clear = lambda *a, **k: rebuilt.append(1) or DataTable.clear(overview, *a, **k)  # type: ignore[method-assign]
        uuid0 = app.model.state.gpus[0].uuid
        select_key(overview, uuid0)

        # 10 events/s: every row is updated in place (no rebuild, no flicker),
        # at most one repaint per render period.
        renders = app.renders
        slow = threading.Thread(target=_toggle_admission, args=(rt, 20, 0.1))
        started = time.monotonic()
        slow.start()
        while slow.is_alive():
            await pilot.pause(0.05)
        await pilot.pause(0.3)
        elapsed = time.monotonic() - started
        assert not rebuilt and selected_key(overview) == uuid0
        assert app.renders - renders <= elapsed / 0.1 + 3

        # As fast as one client can go (about 1000 events/s here): the feed
        # folds batches into one post each and ends on the runtime's state.
        applied, posts = app.live.events_applied, app.live.posts
        result: list[float] = []
        fast = threading.Thread(target=lambda: result.append(_toggle_admission(rt, 3000, 0)))
        fast.start()
        while fast.is_alive():
            await pilot.pause(0.05)
        final = runtime_state(rt)
        await wait_for(pilot, lambda: app.model.state.seq >= final.seq, 20, "the console to catch up")
        events = app.live.events_applied - applied
        assert events >= 3000 - 5 or app.live.snapshots_taken > 1
        assert app.live.posts - posts < events / 3, (app.live.posts - posts, events, result)
        comparable = node_state.to_snapshot(app.model.state) | {"time": 0}
        assert comparable == node_state.to_snapshot(final) | {"time": 0}
        print(f"fast stream: {result[0]:.0f} events/s, {events} applied in {app.live.posts - posts} posts")


def test_feed_keeps_up_by_folding(make_runtime: Any) -> None:
    _fold(make_runtime(policy="krex"))
