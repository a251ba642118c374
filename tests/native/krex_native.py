"""Helpers for the interception library's tests: builds, environments, stats files.

Every test runs real processes: C test programs from native/tests (linked
against the simulated driver where they call it) and Python scripts, with
libkrex.so preloaded, in the normal and the ASan/UBSan build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NATIVE = REPO / "native"
VARIANTS = ("normal", "asan")

SAN_ENV = {
    # leaks: the simulated driver and Python keep what they allocate until exit
    "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}
SAN_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: UndefinedBehaviorSanitizer")


@dataclass(frozen=True)
class Build:
    variant: str
    root: Path  # native/build or native/build/asan

    @property
    def libkrex(self) -> Path:
        return self.root / "libkrex.so"

    @property
    def sim_dir(self) -> Path:
        return self.root / "sim"

    def tool(self, name: str) -> Path:
        return self.root / "tests" / name

    def env(self, *, preload: bool = True, python_host: bool = False, **extra: str) -> dict[str, str]:
        """Environment for a tenant: the library preloaded, the simulator found."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KREX_")}
        env["LD_LIBRARY_PATH"] = f"{self.sim_dir}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
        if preload:
            libs = [str(self.libkrex)]
            if self.variant == "asan":
                # The ASan runtime must come first in the initial library list,
                # before the preloaded library, whatever the host program.
                libs.insert(0, asan_runtime())
            env["LD_PRELOAD"] = " ".join(libs)
        if self.variant == "asan":
            env.update(SAN_ENV)
        env["PYTHONPATH"] = str(REPO)
        env.update(extra)
        return env


def asan_runtime() -> str:
    cc = os.environ.get("CC", "cc")
    return subprocess.run([cc, "-print-file-name=libasan.so"], check=True, capture_output=True,
                          text=True).stdout.strip()


def make(*targets: str, asan: bool = False) -> None:
    args = ["make", "-s", "-C", str(NATIVE), f"-j{os.cpu_count() or 2}"]
    if asan:
        args += ["BUILD=build/asan", "EXTRA_CFLAGS=-fsanitize=address,undefined -fno-omit-frame-pointer -O1"]
    subprocess.run(args + list(targets), check=True)





def check_sanitizers(stderr: str) -> None:
    for marker in SAN_MARKERS:
        assert marker not in stderr, f"sanitizer report:\n{stderr[-4000:]}"


def read_stats(path: Path) -> list[dict]:
    """The JSON lines the library appended at process exit (KREX_INTERCEPT_STATS)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def python() -> str:
    return sys.executable
