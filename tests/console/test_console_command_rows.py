"""The Commands view shows each command once, and exactly the commands its
filter matches, whatever happens to them and to the feed meanwhile.

A simulated runtime (a reference NodeState folded by the one reducer, as
the runtime's own event log folds it) emits seeded random events: commands
submitted with and without a GPU, started on any GPU, finished in every end
state, cancelled while queued, aged out past keep_finished, labels that name
another command's id; the runtime restarts (sometimes with ids the earlier
run used). They reach the console through the real LiveFeed's handling of
PUB messages (`_take`): some are lost (a gap, then a resync by the snapshot
verb), some come twice, snapshots are published between them, late or
early. Meanwhile the operator types and clears filters, sorts, scrolls and
switches views. After each step the feed's state is the runtime's (nothing
applied twice or missed), the table's rows are the matching commands (newest
first when unsorted) with each row's ID cell its own key, and the screen, as
a terminal shows it, lists each id once.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from typing import Any

import pytest
from console_helpers import TerminalCopy, run_async, screen_text
from textual.widgets import TabbedContent

from krex_console.app import KrexConsole
from krex_console.feed import LiveFeed
from krex_console.views import command_list, table_sync
from krex_console.views.command_list import CommandsTable, matches
from krex_console.widgets import FilterInput
from krex_runtime.wire.protocol import envelope as protocol
from krex_runtime.wire.state import apply as node_state

SEED = 19
STEPS = 50
GPUS = 3
KEEP_FINISHED = 120  # finished commands age out during the run
ROW_ID = re.compile(r"^ ?([0-9a-f]{4}-(?:canary)?\d+) ")
FILTERS = ["", "state:running", "state:", "state:q", "gpu:1", "-1", "cand", "state:fin gpu:0", "zzz"]


class SimulatedRuntime:
    """Events as a runtime emits them, and its state (what a snapshot says)."""

    def __init__(self, rng: random.Random, pid: int, nonce: str, t: float) -> None:
        self.rng = rng
        self.pid, self.nonce, self.t = pid, nonce, t
        self.state = node_state.NodeState()
        self.seq = 0
        self.ids = 0
        self.started = self.emit("runtime_started", node="n1", policy="krex", pid=pid, keep_finished=KEEP_FINISHED, regions=None,
                  recovered=[], gpus=[{"index": i, "uuid": f"GPU-SIM-t-{i}", "name": "sim", "memory_total": 1 << 34,
                                       "simulated": True, "slots": 3, "cpus": [0]} for i in range(GPUS)])
        for g in range(GPUS):  # the canaries, as start_internal names them
            self.ids += 1
            cid = f"{nonce}-canary{self.ids}"
            self.emit("command_queued", id=cid, argv=["python3", "-m", "krex_runtime.tenant.canary"], gpu=g,
                      timeout_s=None, label="canary", lease=False)
            self.emit("command_started", id=cid, gpu=g, pid=pid + 1000 + g, tenant_id=1000 + g)

    def emit(self, type_: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        self.t += 0.25
        event = {"seq": self.seq, "t": self.t, "type": type_, **fields}
        node_state.apply(self.state, event)
        return json.loads(json.dumps(event))  # what the wire carries: nothing shared with the state

    def snapshot(self) -> dict[str, Any]:
        return json.loads(json.dumps({"seq": self.state.seq, "state": node_state.to_snapshot(self.state)}))

    def step(self) -> dict[str, Any]:
        s, rng = self.state, self.rng
        queued = [s.commands[c] for c in s.queue]
        running = [c for c in s.commands.values() if c.state == "running" and c.label != "canary"]
        roll = rng.random()
        if roll < 0.4 or not (queued or running):
            self.ids += 1
            cid = f"{self.nonce}-{self.ids}"
            # A label that names another command's id: the filter matches both, the ID column tells them apart.
            label = rng.choice(["", f"cand-{self.ids}", f"{self.nonce}-{self.ids - 1}", "retry"])
            return self.emit("command_queued", id=cid, argv=["python3", "bench.py", str(self.ids)],
                             gpu=rng.choice([None, None, *range(GPUS)]), timeout_s=60.0, label=label, lease=False)
        if queued and (roll < 0.7 or not running):
            cmd = rng.choice(queued)
            if rng.random() < 0.15:
                return self.emit("command_finished", id=cmd.id, state="cancelled", reason="cancelled by request")
            gpu = cmd.gpu_request if cmd.gpu_request is not None else rng.randrange(GPUS)
            return self.emit("command_started", id=cmd.id, gpu=gpu, pid=self.pid + self.ids, tenant_id=self.ids)
        cmd = rng.choice(running)
        end = rng.choice(["finished", "finished", "failed", "timeout", "cancelled"])
        return self.emit("command_finished", id=cmd.id, state=end, exit_code=0 if end == "finished" else 1,
                         signal=9 if end == "timeout" else None, reason="" if end == "finished" else end)


class SnapshotClient:
    """The control connection's `snapshot` verb, answered by the simulated runtime."""

    def __init__(self, runtime: SimulatedRuntime) -> None:
        self.runtime = runtime

    async def call(self, verb: str, body: Any = None, timeout: float | None = None) -> dict[str, Any]:  # noqa: ASYNC109 (AsyncClient.call's)
        assert verb == "snapshot", verb
        return self.runtime.snapshot()


def expected_ids(state: node_state.NodeState, query: str) -> list[str]:
    shown = [c for c in state.commands.values() if not query or matches(c, query)]
    shown.sort(key=lambda c: (c.submitted_at, c.id), reverse=True)
    return [c.id for c in shown[: command_list.MAX_ROWS]]


def ids_on_screen(text: str) -> list[str]:
    return [m.group(1) for line in text.splitlines() if (m := ROW_ID.match(line))]


class Churn:
    """The console under churn: the simulated runtime's events through the
    feed (lost, twice or once), its restarts and late snapshots, and the
    operator's filters, sorts, scrolls and tabs; `check` holds the console
    to the runtime after each step."""

    def __init__(self, rng: random.Random, runtime: SimulatedRuntime, app: KrexConsole, feed: LiveFeed,
                 pilot: Any) -> None:
        self.rng, self.runtime, self.app, self.feed, self.pilot = rng, runtime, app, feed, pilot
        self.client = SnapshotClient(runtime)
        self.terminal = TerminalCopy(app)
        self.table = app.query_one(CommandsTable)
        self.late_snapshot: dict[str, Any] | None = None
        self.checks = self.terminal_checks = 0

    async def deliver(self, event: dict[str, Any]) -> None:
        """One PUB message through the feed: lost, twice, or once."""
        fate = self.rng.random()
        if fate < 0.04:
            return  # dropped: the next event shows the gap
        if self.feed._take(protocol.TOPIC_EVENT, event):
            await self.feed._resync(self.client)
        if fate > 0.95:
            self.feed._take(protocol.TOPIC_EVENT, event)  # the same message again: already applied

    async def runtime_side(self) -> None:
        """A step of the runtime: events, now and then a restart or a late snapshot."""
        rng, feed = self.rng, self.feed
        for _ in range(rng.randint(1, 25)):
            await self.deliver(self.runtime.step())
        roll = rng.random()
        if roll < 0.08:  # the runtime restarts: a new pid, and now and then the ids of the last run
            nonce = self.runtime.nonce if rng.random() < 0.5 else f"{rng.randrange(1 << 16):04x}"
            self.runtime = SimulatedRuntime(rng, pid=self.runtime.pid + 10, nonce=nonce, t=self.runtime.t + 5)
            self.client.runtime = self.runtime
            # Its runtime_started comes first on PUB: the feed asks for a snapshot.
            assert feed._take(protocol.TOPIC_EVENT, self.runtime.started)
            await feed._resync(self.client)
        elif roll < 0.3:
            self.late_snapshot = self.late_snapshot or self.runtime.snapshot()
            if rng.random() < 0.5:
                feed._take(protocol.TOPIC_SNAPSHOT, self.late_snapshot)  # an older one, arriving late: ignored
                self.late_snapshot = None
        feed._post_state(1)

    async def operate(self, step: int) -> None:
        """A step of the operator: a filter, another tab, a sort, a scroll or a command's detail."""
        rng, table, pilot = self.rng, self.table, self.pilot
        action = rng.random()
        if action < 0.3:
            await self.set_filter(rng.choice(FILTERS), step)
        elif action < 0.36:
            self.app.action_show_tab(rng.choice(["overview", "events"]))
            await self.check(step)
            self.app.action_show_tab("commands")
        elif action < 0.46:
            if rng.random() < 0.5:
                table.action_cycle_sort()
            else:
                table.sort_by(rng.choice(["gpu", "state", "id", None]))
        elif action < 0.66:
            await pilot.press(rng.choice(["end", "home", "pagedown", "j", "k"]))
        elif action < 0.7 and table.row_count:
            await pilot.press("enter")  # a command's detail, and back
            await pilot.press("escape")

    def check_rows(self, step: int) -> list[str]:
        """The table's rows are the commands the filter matches, each once,
        each row's ID cell its own key."""
        table = self.table
        keys = [row.key.value for row in table.ordered_rows]
        assert len(keys) == len(set(keys)), (step, keys)
        wanted = expected_ids(self.app.model.state, table.query_text)
        if table.sort_column is None:
            assert keys == wanted, (step, table.query_text)
        else:
            assert sorted(keys) == sorted(wanted), (step, table.query_text, table.sort_column)
        assert all(str(table.get_row(k)[0]) == k for k in keys), step
        return keys

    async def check(self, step: int) -> None:
        app, feed = self.app, self.feed
        # The periodic snapshot: ignored at the feed's seq, the new base after a lost last event.
        feed._take(protocol.TOPIC_SNAPSHOT, self.runtime.snapshot())
        feed._post_state(1)
        for _ in range(2000):  # the app takes the feed's newest state from its message
            if app.model.state is feed.state:
                break
            await asyncio.sleep(0.005)
        assert app.model.state is feed.state, step
        app.refresh_views()
        await self.pilot.pause(0.01)
        # Nothing applied twice or missed: the console's state is the runtime's.
        got, want = (json.loads(json.dumps(node_state.to_snapshot(s))) for s in (feed.state, self.runtime.state))
        assert got == want, step
        if app.query_one("#tabs", TabbedContent).active != "commands":
            return
        self.checks += 1
        await self.check_screen(step, self.check_rows(step))

    async def check_screen(self, step: int, keys: list[str]) -> None:
        """The screen shows the rows once settled (a rebuild's scroll and sizes
        land a frame later); a terminal, which gets only the regions
        repainted, shows the same."""
        table, terminal = self.table, self.terminal

        def render() -> str:
            return "\n".join(line.rstrip() for line in screen_text(self.app).splitlines())

        def shown_right(text: str) -> bool:
            seen = ids_on_screen(text)
            # Never one id twice, not even in a frame the screen passes through on its way.
            assert len(seen) == len(set(seen)), (step, seen)
            top = int(table.scroll_y)
            return seen == keys[top : top + len(seen)] and bool(seen or not keys)

        for _ in range(100):
            text = render()
            if shown_right(text) and (step % 5 or terminal.text() == text):
                break
            await self.pilot.pause(0.05)
        assert shown_right(text), (step, int(table.scroll_y), keys, text)
        if step % 5 == 0:
            self.terminal_checks += 1
            assert terminal.text() == text, f"step {step}, the terminal:\n{terminal.text()}\n--- the render:\n{text}"

    async def set_filter(self, query: str, step: int) -> None:
        """As typed, a key at a time (`state:` on the way to `state:running`
        matches nothing), with events between keys; the box gets the whole text."""
        table = self.table
        box = self.app.query_one("#commands-filter", FilterInput)
        was = table.query_text
        common = 0
        while common < min(len(was), len(query)) and was[common] == query[common]:
            common += 1
        for prefix in [was[:n] for n in range(len(was) - 1, common - 1, -1)] + [
                query[:n] for n in range(common + 1, len(query))]:
            if self.rng.random() < 0.3:
                await self.deliver(self.runtime.step())
            table.query_text = prefix
            table.refresh_from(self.app.model)
            self.check_rows(step)
        box.add_class("shown")
        box.value = query
        await self.pilot.pause()
        assert table.query_text == query


@run_async
async def test_each_command_shows_once_through_churn_gaps_snapshots_and_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small enough that the cap drops rows and a filter change takes the one-rebuild path.
    monkeypatch.setattr(command_list, "MAX_ROWS", 45)
    monkeypatch.setattr(table_sync, "REBUILD_FROM", 12)
    rng = random.Random(SEED)
    runtime = SimulatedRuntime(rng, pid=4000, nonce="001a", t=1_800_000_000.0)
    app = KrexConsole()  # no feed of its own: this test's LiveFeed posts to it
    feed = LiveFeed("ipc:///nonexistent/control.sock", "ipc:///nonexistent/telemetry.sock", app.post_message)
    async with app.run_test(size=(120, 40)) as pilot:
        churn = Churn(rng, runtime, app, feed, pilot)
        await pilot.press("2")
        await feed._resync(churn.client)
        for step in range(STEPS):
            await churn.runtime_side()
            await churn.operate(step)
            await churn.check(step)
        assert churn.checks > STEPS // 2 and churn.terminal_checks > 5
