"""An action key that can do nothing says why (a notice), instead of doing
nothing in silence: in replay, on a GPU without a context pool, on a GPU not
leased (release), on an ended command (kill), and where no GPU is selected.
And the demo's config has a pool, so its recycle key can be tried: there `c`
opens the confirm dialog naming the GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from console_helpers import live_app, rendered, run_async, submit, wait_for
from runtime_helpers import REPO

from krex_console.dialogs import ConfirmDialog
from krex_console.feed import FeedStatus
from krex_console.main import build_parser, make_app
from krex_console.views.command_list import CommandsTable
from krex_runtime.node.config import load_config
from krex_runtime.testing.local_runtime import Runtime

TRACE = Path(__file__).parent / "data" / "small-trace.jsonl"


def notices(app: Any) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def pressed(pilot: Any, key: str) -> str:
    """The notice pressing `key` brings."""
    before = len(notices(pilot.app))
    await pilot.press(key)
    return await wait_for(pilot, lambda: notices(pilot.app)[before:] and notices(pilot.app)[-1], what=f"a notice for {key}")


@run_async
async def test_in_replay_an_action_key_says_actions_are_off() -> None:
    app = make_app(build_parser().parse_args(["--replay", str(TRACE), "--paused", "--at", "0.9"]))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.model.state.seq > 0, what="the replayed state")
        await rendered(pilot)
        assert await pressed(pilot, "c") == "replay: a trace cannot be acted on (actions are off)"
        assert not isinstance(app.screen, ConfirmDialog)


@run_async
async def _says_why(rt: Runtime) -> None:
    app = live_app(rt)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.status == FeedStatus.LIVE and app.model.state.gpus, what="the live feed")
        await rendered(pilot)
        assert await pressed(pilot, "c") == "GPU 0 has no context pool to recycle (the runtime's [pool] size_per_gpu is 0)"
        assert await pressed(pilot, "u") == "GPU 0 has no operator lease to release (l leases it)"
        assert not isinstance(app.screen, ConfirmDialog)
        await pilot.press("3")  # the events view: no GPU there
        await rendered(pilot)
        assert await pressed(pilot, "l") == "lease acts on the selected GPU (1: overview): select one first"
        ended = submit(rt, ["true"], label="quick")
        await wait_for(pilot, lambda: (app.model.state.commands.get(ended) or None) and
                       app.model.state.commands[ended].state == "finished", 30, "the command's end")
        await pilot.press("2")
        await wait_for(pilot, lambda: app.query_one(CommandsTable).row_count, what="rows")
        await rendered(pilot)
        assert await pressed(pilot, "ctrl+k") == f"command {ended} has ended (finished): nothing to kill"


def test_a_key_that_can_do_nothing_says_why(make_runtime: Any) -> None:
    _says_why(make_runtime(policy="krex", slots=2, sim=1))


def test_the_demo_config_has_a_pool() -> None:
    assert load_config(str(REPO / "configs" / "simulated.toml")).pool.size_per_gpu >= 1


@run_async
async def _recycle_offered(rt: Runtime) -> None:
    rt.wait_pool_warm(1, 120)
    app = live_app(rt)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.status == FeedStatus.LIVE and app.model.state.gpus, what="the live feed")
        await wait_for(pilot, lambda: (app.model.state.gpus[0].pool or {}).get("size"), what="the pool in the state")
        await rendered(pilot)
        await pilot.press("c")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog) and app.screen, what="the dialog")
        assert dialog.action_plan.question.startswith("Recycle contexts of GPU 0 ")
        await pilot.press("enter")  # Cancel has the focus


def test_with_a_pool_recycle_asks_first(make_runtime: Any) -> None:
    _recycle_offered(make_runtime(policy="krex", slots=2, sim=1, extra_config="[pool]\nsize_per_gpu = 1\n"))
