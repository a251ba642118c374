"""The README's demo in a real terminal: scripts/demo.sh in tmux opens the
console, the GPU rows can be read off the screen, and quitting ends it all."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from runtime_helpers import REPO

DEMO_GPUS = 4
ROW = re.compile(r"^\s*(\d)(\s{2,})(\S.*KREX simulated GPU.*)$")  # GPU index ... its device name


def demo_processes(run_dir: Path) -> list[psutil.Process]:
    """The demo's runtime, workload and tenants: anything tied to its run dir."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if str(run_dir) in " ".join(proc.info["cmdline"] or []) or proc.environ().get("KREX_RUN_DIR") == str(run_dir):
                found.append(proc)
        except psutil.Error:
            continue
    return found


class Tmux:
    def __init__(self, name: str) -> None:
        self.base = ["tmux", "-L", name]  # a server of our own: the operator's tmux is left alone
        self.session = name

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, check=check, timeout=10)

    def screen(self) -> str:
        done = self("capture-pane", "-p", "-t", self.session, check=False)
        return done.stdout if done.returncode == 0 else ""

    def alive(self) -> bool:
        return self("has-session", "-t", self.session, check=False).returncode == 0


def wait_screen(tmux: Tmux, predicate: object, timeout_s: float, what: str) -> str:
    deadline = time.monotonic() + timeout_s
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux.screen()
        if predicate(screen):  # type: ignore[operator]
            return screen
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; the screen:\n{screen}")


@pytest.mark.timeout(120)
def test_demo_opens_the_console_and_quits_cleanly(tmp_path: Path) -> None:
    """In a folder of its own (KREX_DEMO_DIR): a user's demo, running or
    ended, and its .demo/ are left as they are."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    user_demo = REPO / ".demo"
    user_demo_before = _listing(user_demo)
    demo = tmp_path / "demo"
    run_dir = demo / "run"
    tmux = Tmux(f"krex-demo-test-{os.getpid()}")
    env = {**os.environ, "TERM": "xterm-256color", "KREX_DEMO_DIR": str(demo)}
    env.pop("KREX_RUN_DIR", None)
    env.pop("KREX_ENDPOINT", None)
    subprocess.run([*tmux.base, "new-session", "-d", "-s", tmux.session, "-x", "160", "-y", "50",
                    "-c", str(REPO), "scripts/demo.sh"], check=True, env=env, timeout=10)
    try:
        def gpu_rows(screen: str) -> dict[int, str]:
            return {int(m.group(1)): m.group(3) for m in map(ROW.match, screen.splitlines()) if m}

        screen = wait_screen(tmux, lambda s: "● LIVE" in s and len(gpu_rows(s)) == DEMO_GPUS, 60, "the console")
        assert "node " in screen and "policy krex" in screen
        # The workload reaches the GPUs: some row shows commands running.
        screen = wait_screen(tmux, lambda s: any(re.search(r"\s[1-4]/4\s", r) for r in gpu_rows(s).values()),
                             30, "running commands on the GPU rows")
        rows = gpu_rows(screen)
        assert sorted(rows) == list(range(DEMO_GPUS))
        for cells in rows.values():
            # Running/slots, and inflation inside regions: the canary's (the demo runs one per GPU)
            # once it has sampled, else the regions' own estimate; n/a until the first release.
            assert re.search(r"\s\d/4\s", cells) and re.search(r"[+-]\d+(\.\d)?%/[+-]\d+(\.\d)?%|n/a", cells), cells
        tmux("send-keys", "-t", tmux.session, "q")
        deadline = time.monotonic() + 30
        while tmux.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not tmux.alive(), f"the demo did not end after q:\n{tmux.screen()}"
        deadline = time.monotonic() + 15
        while demo_processes(run_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not demo_processes(run_dir), f"left behind: {demo_processes(run_dir)}"
        assert (demo / "trace.jsonl").exists()
        after = _listing(user_demo)  # a user's demo running meanwhile may add files, never lose one
        assert all(after.get(name) == inode for name, inode in user_demo_before.items()), "the user's .demo/ was touched"
    finally:
        if tmux.alive():
            tmux("kill-session", "-t", tmux.session, check=False)
        tmux("kill-server", check=False)


def _listing(folder: Path) -> dict[str, int]:
    """What `folder` holds (a user's demo: its trace, logs and run dir), each
    with its inode: removed or made afresh, it would change. What the run dir
    holds comes and goes while that demo runs."""
    if not folder.exists():
        return {}
    return {p.name: p.stat().st_ino for p in folder.iterdir()}
