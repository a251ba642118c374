"""Small modules and short functions, measured on the real tree: no module of
the product over 450 lines, no function over 80 (docs/architecture.md, "Sizes").
A module that grows past the bound is a part asking for its own folder; a
function past it is a pipeline asking for named steps.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("krex_runtime", "krex_console", "krex_cluster", "krex_bench")
MODULE_LINES = 450
FUNCTION_LINES = 80


def product_modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def test_no_module_is_over_the_bound() -> None:
    long = {str(p.relative_to(REPO)): n for p in product_modules()
            if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert not long, f"modules over {MODULE_LINES} lines: {long}"


def test_no_function_is_over_the_bound() -> None:
    long = {}
    for path in product_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(REPO)}:{node.lineno} {node.name}"] = lines
    assert not long, f"functions over {FUNCTION_LINES} lines: {long}"


def test_the_measure_sees_the_tree() -> None:
    # A wrong root would pass the two tests above on nothing.
    assert len(product_modules()) > 100
