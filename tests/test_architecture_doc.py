"""docs/architecture.md matches the code: every module of the runtime and the
console is on the map, and every file the map names exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = (REPO / "docs" / "architecture.md").read_text()


def modules() -> set[str]:
    found = set()
    for package in ("krex_runtime", "krex_console"):
        for path in (REPO / package).rglob("*.py"):
            if path.name != "__init__.py":
                found.add(path.name)
    return found


def test_every_module_is_on_the_map() -> None:
    named = set(re.findall(r"\b([a-z_]+\.py)\b", DOC))
    missing = sorted(modules() - named)
    assert not missing, f"docs/architecture.md does not place: {missing}"


def test_every_file_the_map_names_exists() -> None:
    everything = {p.name for p in REPO.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts}
    named = set(re.findall(r"\b([a-z_]+\.(?:py|c|h|toml))\b", DOC))
    assert not sorted(named - everything), f"docs/architecture.md names files that do not exist: {sorted(named - everything)}"


def test_every_runtime_package_is_on_the_map() -> None:
    packages = {p.parent.name for p in (REPO / "krex_runtime").glob("*/__init__.py")}
    assert all(f"{name}/" in DOC for name in packages), packages
