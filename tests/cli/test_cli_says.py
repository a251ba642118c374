"""What `krex` says when it did less than asked: `krex run --auto-region`
that wrapped nothing, and `krex bench report` without matplotlib (no PNG),
each in one line on stderr, without --json too."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import (
    bench_result,
    module_runtime,
)

from krex_runtime.testing.local_runtime import Runtime

# krex-bench's own main (`krex bench` runs that program), in a Python that cannot import matplotlib.
WITHOUT_MATPLOTLIB = ("import sys; sys.modules['matplotlib'] = None; from krex_bench.cli import main; "
                      "sys.exit(main(sys.argv[1:]))")


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory, native_built: Path) -> Iterator[Runtime]:
    yield from module_runtime(tmp_path_factory.mktemp("says") / "rt", policy="krex", sim=1, slots=4)


def test_auto_region_that_wrapped_nothing_says_so(rt: Runtime) -> None:
    asked = rt.krex("run", "--auto-region", "--", "true")
    assert asked.returncode == 0
    lines = asked.stderr.splitlines()
    assert len(lines) == 1 and "--auto-region wrapped nothing" in lines[0] and "--auto-region-entry" in lines[0], asked.stderr
    assert rt.krex("run", "--", "true").stderr == ""  # not asked: nothing to say
    as_json = rt.krex("run", "--json", "--auto-region", "--", "true")
    assert json.loads(as_json.stdout)["auto_regions"] == [] and "wrapped nothing" in as_json.stderr


def results_file(folder: Path) -> Path:
    results = [bench_result("mm", f"c{i}", 2.0, 1500) for i in range(3)]
    runs = [{"setup": {"kind": label.split()[0], "label": label, "concurrency": 1}, "results": results, "failures": []}
            for label in ("native", "native-repeat", "krex c4")]
    path = folder / "results.json"
    path.write_text(json.dumps({"date": "d", "simulated": True, "machine": {}, "workload": [], "scale": 1,
                                "argv": ["krex"], "runs": runs}))
    return path


def test_bench_report_without_matplotlib_says_there_is_no_png(tmp_path: Path) -> None:
    results = results_file(tmp_path)
    done = subprocess.run([sys.executable, "-c", WITHOUT_MATPLOTLIB, "report", str(results), "--out",
                           str(tmp_path / "bare")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ("krex bench: no PNG chart: matplotlib is not installed (pip install 'krex-runtime[bench]'); "
                           "the markdown and JSON are complete\n")
    assert not (tmp_path / "bare" / "report.png").exists() and (tmp_path / "bare" / "report.md").exists()
    drawn = subprocess.run([sys.executable, "-m", "krex_runtime.cli", "bench", "report", str(results), "--out",
                            str(tmp_path / "drawn")], capture_output=True, text=True, timeout=120)
    assert drawn.returncode == 0 and "no PNG" not in drawn.stderr and (tmp_path / "drawn" / "report.png").exists()
