"""docs/architecture.md matches the code, package by package: every module and
every folder of the runtime, the console, the cluster layer and the bench is
placed in its package's part of the map, every file the map names exists,
and no module name says two things within a package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text()


def _section(heading: str) -> str:
    """The text of one `## ` section of the map, heading included."""
    start = DOC.index(heading)
    end = DOC.find("\n## ", start + len(heading))
    return DOC[start:] if end < 0 else DOC[start:end]


# Where each package is drawn: the runtime and the console share the map of packages.
SECTIONS = {
    "krex_runtime": "## Packages",
    "krex_console": "## Packages",
    "krex_cluster": "## Beyond one node: `krex_cluster/`",
    "krex_bench": "## Measuring: `krex_bench/`",
}


def modules(package: str) -> list[Path]:
    return sorted(p.relative_to(REPO / package) for p in (REPO / package).rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def named(text: str) -> set[str]:
    return set(re.findall(r"\b([a-z_]+\.py)\b", text))


@pytest.mark.parametrize("package", sorted(SECTIONS))
def test_every_module_is_on_its_packages_map(package: str) -> None:
    placed = named(_section(SECTIONS[package]))
    missing = [str(m) for m in modules(package) if m.name not in placed]
    assert not missing, f"docs/architecture.md ({SECTIONS[package]}) does not place these {package} modules: {missing}"


@pytest.mark.parametrize("package", sorted(SECTIONS))
def test_every_folder_is_on_its_packages_map(package: str) -> None:
    text = _section(SECTIONS[package])
    folders = sorted({m.parent.name for m in modules(package) if m.parent != Path(".")})
    assert all(f"{name}/" in text for name in folders), [n for n in folders if f"{n}/" not in text]


@pytest.mark.parametrize("package", sorted(SECTIONS))
def test_a_module_name_says_one_thing_in_its_package(package: str) -> None:
    """Two modules of one name in one package read as one on the map (and to a reader)."""
    seen: dict[str, list[str]] = {}
    for m in modules(package):
        if m.name != "__main__.py":  # Python's name for the entry point of `python -m <package>`, any package's
            seen.setdefault(m.name, []).append(str(m))
    assert not {n: p for n, p in seen.items() if len(p) > 1}, {n: p for n, p in seen.items() if len(p) > 1}


def test_every_file_the_map_names_exists() -> None:
    everything = {p.name for p in REPO.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts}
    names = set(re.findall(r"\b([a-z_]+\.(?:py|c|h|toml))\b", DOC))
    assert not sorted(names - everything), f"docs/architecture.md names files that do not exist: {sorted(names - everything)}"


def test_the_readme_names_every_system_package_setup_installs() -> None:
    """scripts/setup.sh may install system packages (as root): the README says which."""
    setup = (REPO / "scripts" / "setup.sh").read_text()
    readme = (REPO / "README.md").read_text()
    installed = [w for line in setup.splitlines() if "apt-get install" in line and "echo" not in line
                 for w in line.split("apt-get install", 1)[1].split() if not w.startswith(("-", ">", "&"))]
    assert installed, "setup.sh installs no system package any more: drop this test"
    for package in installed:
        assert f"`{package}`" in readme, f"scripts/setup.sh installs {package}; the README does not say so"
