"""A command's cgroup that vanishes under the freezer and the dispatcher.

When a tenant ends while another enters its region, the freezer reads and
writes the files of a cgroup the kernel is removing. The kernel then answers
ENODEV, not ENOENT. Provoked here for real, by a race with real tenants, and
deterministically: a file of a real command cgroup is
opened, the cgroup is removed, and the file is reached again through
/proc/self/fd, which is what the kernel answers ENODEV for. A folder of links
to those files stands for the vanishing cgroup."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import PY, TENANTS, krex_runtime

from krex_runtime.host import cgroups
from krex_runtime.host.cgroups import CgroupSlice
from krex_runtime.regions.freezer import CgroupV1Freezer, CgroupV2Freezer, Target
from krex_runtime.testing.local_runtime import command

FILES = ("cgroup.events", "cgroup.freeze", "cgroup.procs", "cgroup.kill", "freezer.state")


@pytest.fixture
def vanished(tmp_path: Path) -> Iterator[Path]:
    slice_ = CgroupSlice.open(tmp_path / "run", 2)
    if slice_ is None:
        pytest.skip("cgroup v2 is not writable here")
    group = slice_.create("cmd-1")
    fds = [os.open(group / name, os.O_RDONLY) for name in FILES[:4]]
    group.rmdir()
    links = tmp_path / "vanished"
    links.mkdir()
    for name, fd in zip(FILES, fds, strict=False):  # freezer.state: linked below, to cgroup.events
        (links / name).symlink_to(f"/proc/{os.getpid()}/fd/{fd}")
    (links / "freezer.state").symlink_to(f"/proc/{os.getpid()}/fd/{fds[0]}")
    try:
        yield links
    finally:
        for fd in fds:
            os.close(fd)
        slice_.remove()


def test_the_kernel_answers_enodev_for_a_vanished_cgroup(vanished: Path) -> None:
    with pytest.raises(OSError) as caught:
        (vanished / "cgroup.events").read_text()
    assert caught.value.errno == errno.ENODEV


def test_freezing_and_thawing_a_vanished_cgroup_is_a_no_op(vanished: Path) -> None:
    for freezer in (CgroupV2Freezer(), CgroupV1Freezer()):
        target = Target("cmd-1", 0, cgroup=vanished)
        freezer.freeze([target])  # a region entry goes on: that tenant ended
        freezer.thaw([target])


def test_the_command_cgroup_helpers_take_a_vanished_cgroup_as_ended(vanished: Path) -> None:
    assert cgroups.read_file(vanished / "cgroup.events") is None
    assert cgroups.write_file(vanished / "cgroup.freeze", "0") is False
    assert cgroups.populated(vanished) is False
    assert cgroups.procs(vanished) == []
    cgroups.kill(vanished)
    cgroups.thaw(vanished)


def test_regions_entered_while_other_tenants_end_never_fail(make_runtime: Any) -> None:
    """Real processes: short commands end (their cgroups removed by the
    dispatcher) while another tenant enters region after region, freezing the
    GPU's other tenants each time. Before ENODEV counted as gone, one entry in
    a few such runs failed with EIO."""
    rt = krex_runtime(make_runtime, slots=8)
    churn = f"for i in $(seq 40); do {' '.join(command('krex'))} submit -- true >/dev/null; done"
    churner = subprocess.Popen(["bash", "-c", churn], env=rt.env)
    try:
        done = rt.krex("run", "--", PY, str(TENANTS / "regions.py"), "--regions", "30", "--kernel-us", "100",
                       "--repeats", "1", "--pause-ms", "20")
    finally:
        churner.wait(timeout=120)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r.get("error") for r in results if "error" in r] == [], results
