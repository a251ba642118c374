"""Writing a generated source file, or checking that the one in the tree is
what its generator makes now (--check, which the tests run)."""

from __future__ import annotations

import difflib
import sys


def write_or_check(path: str, rendered: str, source: str, check: bool, what: str = "") -> int:
    """Writes `rendered` to `path` and says so (with `what` it holds); with
    `check`, compares instead: 1 (and the diff on stdout) when `path` is out of
    date with `source`, else 0. The exit status of the generator."""
    if not check:
        with open(path, "w", encoding="utf-8") as f:
            f.write(rendered)
        print(f"wrote {path}" + (f": {what}" if what else ""))
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
