"""Writing a generated source file, or checking that the one in the tree is
what its generator makes now (--check, which the tests run)."""

from __future__ import annotations

import difflib
import sys


def write_or_check(path: str, rendered: str, source: str, check: bool) -> int:
    """Writes `rendered` to `path`; with `check`, compares instead: 1 (and the
    diff on stdout) when `path` is out of date with `source`, else 0."""
    if not check:
        with open(path, "w", encoding="utf-8") as f:
            f.write(rendered)
        return 0
    try:
        with open(path, encoding="utf-8") as f:
            current = f.read()
    except FileNotFoundError:
        current = ""
    if current == rendered:
        return 0
    sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), rendered.splitlines(True), path, "generated"))
    print(f"{path} is out of date with {source}", file=sys.stderr)
    return 1
