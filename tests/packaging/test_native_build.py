"""Where the runtime finds its native libraries: an override, an installed
wheel's copy, or this checkout's build (tests/packaging/test_wheel.py covers
the wheel's)."""

from __future__ import annotations

from pathlib import Path

from krex_runtime.node import native_build

REPO = Path(__file__).resolve().parents[2]


def test_a_checkout_uses_native_build(monkeypatch) -> None:
    monkeypatch.delenv("KREX_NATIVE_DIR", raising=False)
    assert native_build.packaged_dir() is None  # nothing is copied into the source tree
    assert native_build.interception_library() == REPO / "native" / "build" / "libkrex.so"
    assert native_build.simulated_driver_dir(sanitized=True) == REPO / "native" / "build" / "asan" / "sim"
    assert (native_build.header_dir() / "krex.h").is_file()


def test_KREX_NATIVE_DIR_overrides(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KREX_NATIVE_DIR", str(tmp_path))
    assert native_build.interception_library() == tmp_path / "libkrex.so"
    assert native_build.interception_library(sanitized=True) == tmp_path / "asan" / "libkrex.so"
    assert native_build.header_dir() == REPO / "native" / "include"  # the override has no include/
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "krex.h").write_text("/* an operator's build */\n")
    assert native_build.header_dir() == tmp_path / "include"
