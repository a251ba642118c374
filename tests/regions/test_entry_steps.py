"""The entry's one runner of steps (regions/region_entry.py): steps run in
order, each timed into its stats field; when one fails, what every step begun
took is given back, the last first, and the failure goes on to the caller."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest

from krex_runtime.regions.region_entry import Entering, Step, take_all
from krex_runtime.regions.region_stats import EntryStats


def entering() -> Entering:
    """The runner reads only the entry's stats."""
    return cast(Entering, SimpleNamespace(stats=EntryStats(wait_s=0.0, gap_s=0.0)))


def step(name: str, done: list[str], *, fails: bool = False, timed_as: str | None = None,
         gives_back: bool = True) -> Step:
    def take(e: Entering) -> None:
        done.append(f"take {name}")
        if fails:
            raise RuntimeError(f"{name} failed")

    def give_back(e: Entering) -> None:
        done.append(f"give back {name}")

    return Step(take, timed_as, give_back if gives_back else None)


def test_steps_run_in_order_and_are_timed_into_their_fields() -> None:
    done: list[str] = []
    e = entering()
    e.stats.close_s = e.stats.drain_s = e.stats.pin_s = -1.0
    take_all(e, [step("close", done, timed_as="close_s"), step("drain", done, timed_as="drain_s"),
                 step("pin", done)], 0.0)
    assert done == ["take close", "take drain", "take pin"]
    assert e.stats.close_s >= 0 and e.stats.drain_s >= 0  # measured
    assert e.stats.pin_s == -1.0  # a step timed as nothing leaves the stats alone


def test_a_failing_step_gives_back_every_step_begun_in_reverse() -> None:
    done: list[str] = []
    steps = [step("close", done), step("quiesce", done, gives_back=False), step("drain", done),
             step("freeze", done, fails=True), step("pin", done)]
    with pytest.raises(RuntimeError, match="freeze failed"):
        take_all(entering(), steps, 0.0)
    # The failing step is given back too: it may have taken part of what it takes.
    assert done == ["take close", "take quiesce", "take drain", "take freeze",
                    "give back freeze", "give back drain", "give back close"]
