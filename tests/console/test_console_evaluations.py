"""The Evaluations view (`e`) at 80x24 and 160x45, driven with Textual's
pilot over a node state of two batches: per batch its progress (done of
total, running, queued), correct, fast_1 and untrusted counts; the pairs of
the highlighted batch; and a pair's detail with its failure, times, its
regions' verdicts and integrity, and why its times are doubted. Labels and
messages a submitter or a tenant chose are shown, never interpreted."""

from __future__ import annotations

from typing import Any

import pytest
from console_helpers import live_app, rendered, run_async, settled_screen, submit, wait_for

from krex_console.app import KrexConsole
from krex_console.views.command_list import CommandDetailScreen
from krex_console.views.evaluations import (
    BatchesTable,
    EvaluationsScreen,
    PairsTable,
    batches,
    doubts,
    label_parts,
)
from krex_runtime.wire.state.model import CommandInfo, NodeState

SIZES = [(80, 24), (160, 45)]
IDS = ["80x24", "160x45"]
CLEAN = {"windows": 100, "clean": True, "summary": "integrity: clean", "flags": {}}


def evaluation(speedup: float | None = 2.0, correct: bool | None = True, failure: str | None = None,
               regions: list[int | None] | None = None, **more: Any) -> dict[str, Any]:
    timed = speedup is not None
    return {"problem": "p", "candidate": "c", "compiled": failure != "compile_error", "correct": correct,
            "failure": failure, "message": "error: expected ';' [bold]x[/bold]" if failure else "",
            "reference_ms": 2.0 * (speedup or 1) if timed else None, "candidate_ms": 2.0 if timed else None,
            "speedup": speedup, "regions": regions if regions is not None else ([1, 2] if timed else []),
            "fresh_check": True if correct else None, "harness_patched": []} | more


def region(rid: int, verdict: str = "verified", integrity: dict[str, Any] | None = CLEAN) -> dict[str, Any]:
    return {"region": rid, "gpu": 0, "kind": "region", "verdict": verdict, "integrity": integrity}


def command(cid: str, label: str, state: str = "finished", ev: dict[str, Any] | None = None,
            regions: list[dict[str, Any]] | None = None, at: float = 0.0) -> CommandInfo:
    return CommandInfo(id=cid, argv=["python3", "-m", "krex_runtime.eval.harness"], label=label, state=state,
                       submitted_at=1000.0 + at, started_at=None if state == "queued" else 1001.0 + at,
                       finished_at=1010.0 + at if state in ("finished", "failed") else None,
                       exit_code=0 if state == "finished" else None, evaluation=ev, regions=regions or [])


def node_state() -> NodeState:
    cmds = [
        command("c1", "eval:run7/1_Square_matmul.py/fast_tiles.py", ev=evaluation(2.0), regions=[region(1), region(2)]),
        command("c2", "eval:run7/1_Square_matmul.py/slow.py", ev=evaluation(0.5, regions=[3, 4]),
                regions=[region(3), region(4)], at=1),
        # Fast, but its candidate's region was not verified: untrusted.
        command("c3", "eval:run7/2_ReLU.py/cached.py", ev=evaluation(9.0, regions=[5, 6]),
                regions=[region(5), region(6, "violated")], at=2),
        command("c4", "eval:run7/2_ReLU.py/broken.py", ev=evaluation(None, None, "compile_error"), at=3),
        command("c5", "eval:run7/3_Conv.py/a.py", state="running", at=4),
        command("c6", "eval:run7/3_Conv.py/b.py", state="queued", at=5),
        command("c7", "eval:[b]b2/4_LayerNorm.py/x.py", ev=evaluation(1.5, regions=[7, 8]),
                regions=[region(7), region(8, integrity=None)], at=6),
        command("c8", "plain command", at=7),
    ]
    return NodeState(node="n1", policy="krex", seq=10, time=1020.0, commands={c.id: c for c in cmds})


def test_batches_count_what_each_batch_has() -> None:
    found = batches(node_state())
    assert sorted(found) == ["[b]b2", "run7"]
    run7 = found["run7"]
    assert (len(run7.commands), run7.count("finished", "failed", "cancelled", "timeout"), run7.count("running"),
            run7.count("queued")) == (6, 4, 1, 1)
    assert (len(run7.correct), run7.fast_1, run7.untrusted) == (3, 2, 1)
    assert found["[b]b2"].untrusted == 1  # its candidate's region has no integrity record
    assert label_parts("eval:b/p.py/c.py") == ("b", "p.py", "c.py") and label_parts("evaluation") is None


def test_what_makes_a_pair_doubtful() -> None:
    ok = command("x", "eval:b/p/c", ev=evaluation(2.0), regions=[region(1), region(2)])
    assert doubts(ok) == []
    patched = command("x", "eval:b/p/c", ev=evaluation(2.0, harness_patched=["torch.cuda.Event.elapsed_time"]),
                      regions=[region(1), region(2)])
    assert doubts(patched) == ["harness patched: torch.cuda.Event.elapsed_time"]
    mismatch = command("x", "eval:b/p/c", ev=evaluation(2.0),
                       regions=[region(1), region(2, integrity=CLEAN | {"timing": {"median_ms": 2.5}})])
    assert doubts(mismatch) == ["region 2 timer mismatch (2 vs 2.5 ms from below)"]
    unseen = command("x", "eval:b/p/c", ev=evaluation(2.0, fresh_check=None, regions=[1, None]), regions=[])
    assert doubts(unseen) == ["region 1 not seen", "candidate timed outside a region", "fresh check missing"]


def app_with_state() -> KrexConsole:
    app = KrexConsole()  # no feed: the test gives it its state
    app.model.state = node_state()
    app.model.now = 1020.0
    return app


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@run_async
async def test_the_evaluations_view_fits(size: tuple[int, int]) -> None:
    app = app_with_state()
    async with app.run_test(size=size) as pilot:
        await pilot.press("e")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, EvaluationsScreen) and app.screen, what="the view")
        await wait_for(pilot, lambda: screen.query_one(BatchesTable).row_count == 2, what="the batches")
        text = await settled_screen(pilot)
        rows = text.splitlines()
        assert len(rows) == size[1] and all(len(row.rstrip()) <= size[0] for row in rows)
        for head in ("Batch", "Done", "Correct", "fast_1", "Untrusted", "Problem", "Outcome", "Trust"):
            assert head in text, (head, text)
        # The first batch ("[b]b2", shown as written) is highlighted: its one pair and its detail.
        assert "[b]b2" in text and "4_LayerNorm.py" in text and "region 8 integrity none" in text, text
        batch_row = next(row for row in rows if "[b]b2" in row)
        assert batch_row.split() == ["[b]b2", "1/1", "0", "0", "1", "1/1", "1"], batch_row  # done run queue correct fast untrusted
        # The next batch: its six pairs, a pair's failure in its detail.
        await pilot.press("j")
        await wait_for(pilot, lambda: screen.query_one(PairsTable).row_count == 6, what="run7's pairs")
        await pilot.press("tab")
        await wait_for(pilot, lambda: screen.query_one(PairsTable).has_focus, what="the pairs")
        await pilot.press("j", "j")  # the third pair by label: 2_ReLU.py/broken.py
        text = await settled_screen(pilot)
        run7 = next(row for row in text.splitlines() if "run7" in row)
        assert run7.split() == ["run7", "4/6", "1", "1", "3", "2/6", "1"], run7
        assert "compile_error: error: expected ';' [bold]x[/bold]" in text, text
        assert "queued" in text and "running" in text and "doubt" in text
        await pilot.press("enter")  # the pair's command: its detail and output
        await wait_for(pilot, lambda: isinstance(app.screen, CommandDetailScreen), what="the command's detail")
        assert app.screen.command_id == "c4"  # type: ignore[attr-defined]
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, EvaluationsScreen), what="back to the view")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, EvaluationsScreen), what="back to the tabs")


@run_async
async def test_no_evaluations_says_so() -> None:
    app = KrexConsole()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, EvaluationsScreen), what="the view")
        text = await settled_screen(pilot)
        assert "no evaluations: commands labelled eval:<batch>/<problem>/<candidate>" in text, text


RESULT = ("import json, sys; print('KREX-EVAL-RESULT ' + json.dumps({'schema': 1, 'problem': 'relu.py', "
          "'candidate': 'fast.py', 'problem_sha256': 'a', 'candidate_sha256': 'b', 'compiled': True, "
          "'correct': False, 'failure': {'class': 'incorrect', 'message': 'input set 0: max abs error 3', "
          "'detail': ''}, 'check': None, 'fresh_check': None, 'timing': None, 'phases_s': {}, "
          "'harness_patched': []}))")


@run_async
async def test_a_live_batch_as_its_commands_end(make_runtime: Any) -> None:
    """A real runtime's commands labelled as a batch: the view counts them as
    they run and end, and shows the result line the runtime kept."""
    import sys

    rt = make_runtime(sim=1)
    app = live_app(rt)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.model.state.node, what="the live feed")
        waiting = submit(rt, ["sleep", "60"], label="eval:live/relu.py/slow.py")
        ended = submit(rt, [sys.executable, "-c", RESULT], label="eval:live/relu.py/fast.py")
        await wait_for(pilot, lambda: (c := app.model.state.commands.get(ended)) is not None and c.evaluation,
                       what="the evaluation in the console's state")
        await pilot.press("e")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, EvaluationsScreen) and app.screen, what="the view")
        await wait_for(pilot, lambda: screen.query_one(PairsTable).row_count == 2, what="the pairs")
        await pilot.press("tab")
        await rendered(pilot)
        text = await settled_screen(pilot)
        assert next(row for row in text.splitlines() if "live" in row).split() == ["live", "1/2", "1", "0", "0", "0/2",
                                                                                   "0"], text
        assert "incorrect: input set 0: max abs error 3" in text, text  # fast.py sorts first
        with rt.client() as client:
            client.call("cancel", {"id": waiting})
        await wait_for(pilot, lambda: app.model.state.commands[waiting].state == "cancelled", what="the cancel")
        await rendered(pilot)
        text = await settled_screen(pilot)
        assert next(row for row in text.splitlines() if "live" in row).split()[1] == "2/2", text
