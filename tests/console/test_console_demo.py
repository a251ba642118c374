"""The README's demo in a real terminal: scripts/demo.sh in tmux opens the
console, the GPU rows can be read off the screen, and quitting ends it all."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import time

import psutil
import pytest
from runtime_helpers import REPO

from krex_runtime.node.config import load_config, resolve_lock_dir

DEMO_RUN_DIR = REPO / ".demo" / "run"
DEMO_GPUS = 4
ROW = re.compile(r"^\s*(\d)(\s{2,})(\S.*KREX simulated GPU.*)$")  # GPU index ... its device name


def demo_gpus_free() -> bool:
    """The demo claims GPU-SIM-demo-0..3 node-wide: a demo already running
    (from this checkout or another) must not be disturbed."""
    lock_dir = resolve_lock_dir(load_config(str(REPO / "configs" / "simulated.toml")))
    for i in range(DEMO_GPUS):
        path = lock_dir / f"gpu-GPU-SIM-demo-{i}.lock"
        if not path.exists():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
    return True


def demo_processes() -> list[psutil.Process]:
    """The demo's runtime, workload and tenants: anything tied to .demo/run."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if str(DEMO_RUN_DIR) in " ".join(proc.info["cmdline"] or []) or proc.environ().get("KREX_RUN_DIR") == str(DEMO_RUN_DIR):
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
def test_demo_opens_the_console_and_quits_cleanly() -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    if not demo_gpus_free() or demo_processes():
        pytest.skip("a KREX demo is running on this node; not disturbing it")
    tmux = Tmux(f"krex-demo-test-{os.getpid()}")
    env = {**os.environ, "TERM": "xterm-256color"}
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
            # Running/slots, and inflation inside regions: the regions' own estimate (no canary in the
            # demo), n/a until the GPU's first region is released.
            assert re.search(r"\s\d/4\s", cells) and re.search(r"[+-]\d+\.\d%/[+-]\d+\.\d%|n/a", cells), cells
        tmux("send-keys", "-t", tmux.session, "q")
        deadline = time.monotonic() + 30
        while tmux.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not tmux.alive(), f"the demo did not end after q:\n{tmux.screen()}"
        deadline = time.monotonic() + 15
        while demo_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not demo_processes(), f"left behind: {demo_processes()}"
    finally:
        if tmux.alive():
            tmux("kill-session", "-t", tmux.session, check=False)
        tmux("kill-server", check=False)
