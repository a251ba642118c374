"""A tenant cannot fill the run folder through its reports, and no report
outlives its command (commands/tenant_reports.py).

A real runtime as root under policy krex, with a uid of its own for the
tenant. The command writes 20 MB into each of its two reports (the
unprotected-timing count and the auto-regions list), as a hostile tenant
would, with plain blocking writes. While it runs each report is the
runtime's pipe, holding nothing on disk and writable by the tenant's group
alone; the command's result counts every byte and keeps a bounded list; once
it has finished nothing of it is left in the folder. What an earlier run
left there (thousands of files, one a tenant's 20 MB) is gone at start.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from krex_runtime.commands import tenant_reports
from krex_runtime.testing.local_runtime import wait_until

UID, GROUP = 62200, 60999  # no account; not the range of the other uid tests
PYTHON = "/usr/bin/python3"  # the runtime's own Python may sit where other uids cannot reach
MB = 1 << 20

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path(PYTHON).exists(), reason=f"needs root and {PYTHON}"
)

FLOOD = r"""
import json, os, sys, time
go = sys.argv[1]
paths = [os.environ["KREX_UNPROTECTED_TIMINGS"], os.environ["KREX_AUTO_REGION_REPORT"]]
line = b"x" * 99 + b"\n"
for path in paths:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)  # blocking, as any tenant may
    for _ in range(20):
        os.write(fd, b"u" * (1 << 20) if path == paths[0] else line * ((1 << 20) // 100))
    os.close(fd)
print(json.dumps({"uid": os.getuid(), "reports": paths}), flush=True)
while not os.path.exists(go):
    time.sleep(0.02)
"""


def test_reports_hold_nothing_on_disk_and_go_with_their_command(open_root: Path, make_runtime: Any) -> None:
    earlier = open_root / "rt" / "run" / tenant_reports.FOLDER
    earlier.mkdir(parents=True)
    for i in range(2000):
        (earlier / f"old-{i}.unprotected").write_bytes(b"u")
    big = earlier / "old-big.unprotected"
    with big.open("wb") as f:
        f.truncate(20 * MB)
    os.chown(big, UID, UID)

    rt = make_runtime(parent=open_root, policy="krex", sim=1, slots=1,
                      tenants_extra=f"uid_range = [{UID}, 1]\ngroup = \"{GROUP}\"\n")
    folder = rt.run_dir / tenant_reports.FOLDER
    assert list(folder.iterdir()) == []  # the earlier run's are gone

    go = open_root / "go"
    command_id = rt.krex("submit", "--auto-region", "--", PYTHON, "-c", FLOOD, str(go)).stdout.strip()
    out = rt.run_dir / "output" / f"{command_id}.stdout"
    wait_until(lambda: out.exists() and out.read_text().strip(), 120, "the tenant to have written its reports")
    wrote = json.loads(out.read_text().splitlines()[0])
    assert wrote["uid"] == UID
    for path in map(Path, wrote["reports"]):
        st = path.lstat()
        # The runtime's pipe, for the tenant's own group to write, holding nothing on disk.
        assert stat.S_ISFIFO(st.st_mode) and st.st_size == 0, path
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, UID, 0o620), path
    assert sum(p.lstat().st_size for p in folder.iterdir()) == 0

    go.touch()
    done = rt.krex("wait", "--json", command_id)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["state"], result["exit_code"]) == ("finished", 0)
    assert result["unprotected_timings"] == 20 * MB  # every byte counted, none kept
    assert result["auto_regions"] == ["x" * 99]  # a bounded list, each name once
    assert list(folder.iterdir()) == []  # read, and gone with its command


def test_a_report_is_bounded_in_what_the_runtime_keeps(tmp_path: Path) -> None:
    """The pipes on their own, without a loop: kept up to the bound, counted in
    full, the pipe gone once closed."""
    reports = tenant_reports.Reports(tmp_path, None)
    keep, count = reports.path("c.auto-regions"), reports.path("c.unprotected")
    reports.open([keep, count], None, keep=keep)
    for path, chunk in ((keep, b"k" * 4096), (count, b"u" * 4096)):
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, chunk)
        os.close(fd)
    reports._open[keep].drain()  # what the loop does as it goes
    fd = os.open(keep, os.O_WRONLY | os.O_NONBLOCK)
    for _ in range(tenant_reports.MAX_KEPT_BYTES // 4096 + 4):
        os.write(fd, b"k" * 4096)
        reports._open[keep].drain()
    os.close(fd)
    kept, counted = reports.close(keep), reports.close(count)
    assert len(kept.kept) == tenant_reports.MAX_KEPT_BYTES and kept.size > tenant_reports.MAX_KEPT_BYTES
    assert (counted.size, counted.kept) == (4096, b"")
    assert list((tmp_path / tenant_reports.FOLDER).iterdir()) == []
