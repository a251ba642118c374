"""The files KREX ships for setting up a node: the default config and the
systemd unit. A wheel carries them inside the package (krex_runtime/_configs,
copied there by setup.py); a checkout reads them from configs/. `krex config
default` and `krex config unit` print them, so an installed node needs no
checkout to find them."""

from __future__ import annotations

from pathlib import Path

# Each shipped file: its name inside the package, and its path in a checkout.
SHIPPED: dict[str, str] = {
    "default.toml": "configs/default.toml",
    "krex-runtime.service": "configs/systemd/krex-runtime.service",
}
PACKAGED = Path(__file__).resolve().parent.parent / "_configs"
CHECKOUT = Path(__file__).resolve().parents[2]
# The unit's krex-runtime, as written in it: `krex config unit` puts the installed one there.
UNIT_RUNTIME_PATH = "/opt/krex/venv/bin/krex-runtime"


def shipped_text(name: str) -> str:
    """The text of a shipped file: the package's copy, else the checkout's."""
    for path in (PACKAGED / name, CHECKOUT / SHIPPED[name]):
        if path.is_file():
            return path.read_text()
    raise FileNotFoundError(f"{name} is neither in {PACKAGED} nor in a checkout (a broken install: reinstall the wheel)")


def unit_text(runtime_path: str | None) -> str:
    """The systemd unit, its krex-runtime paths pointed at `runtime_path` when given."""
    text = shipped_text("krex-runtime.service")
    return text.replace(UNIT_RUNTIME_PATH, runtime_path) if runtime_path else text
