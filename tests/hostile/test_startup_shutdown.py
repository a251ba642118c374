"""Start-up is one transaction and shutdown releases everything: whatever
path a runtime takes out, the node is left as it was (the hygiene checks:
processes, cgroups and the slice, gates, sockets, locks, shared memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime_helpers import start_refused

from krex_runtime.testing import hygiene
from krex_runtime.testing.local_runtime import Runtime, wait_until


def test_an_unwritable_trace_path_is_one_line_and_leaves_nothing(tmp_path: Path, native_built: Path) -> None:
    before = hygiene.baseline()
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    rt = Runtime(tmp_path / "rt", sim=2, policy="krex")
    line = start_refused(rt, "--trace", str(not_a_folder / "trace.jsonl"))
    assert line.startswith(f"krex-runtime: cannot write the trace {not_a_folder / 'trace.jsonl'}: "), line
    assert hygiene.leftovers(rt.run_dir, rt.lock_dir, before) == []
    assert not (rt.run_dir / "region.sock").exists()


def test_sigterm_with_canaries_on_three_gpus_leaves_nothing(make_runtime: Any) -> None:
    before = hygiene.baseline()
    rt = make_runtime(sim=3, policy="krex", canary=True)

    def canaries_running() -> bool:
        with rt.client() as c:
            return sum(1 for cmd in c.call("snapshot")["state"]["commands"] if cmd["state"] == "running") >= 3

    wait_until(canaries_running, 60, "a canary on each GPU")
    assert rt.stop() == 0
    assert hygiene.leftovers(rt.run_dir, rt.lock_dir, before) == []


def test_a_region_channel_that_cannot_listen_is_one_line_and_leaves_nothing(tmp_path: Path, native_built: Path) -> None:
    before = hygiene.baseline()
    rt = Runtime(tmp_path / "rt", sim=2, policy="krex", canary=True)
    (rt.run_dir / "region.sock").mkdir(parents=True)  # in the way of the socket
    line = start_refused(rt)
    assert line == f"krex-runtime: cannot serve the region channel on {rt.run_dir / 'region.sock'}: Is a directory", line
    assert hygiene.leftovers(rt.run_dir, rt.lock_dir, before) == []
    assert not list((rt.run_dir / "gates").glob("*"))
