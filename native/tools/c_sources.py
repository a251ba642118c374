"""What the hand-written C sources of native/ define, for the generators that
write the rest of an API (gen_simcuda_entry_points.py, gen_cudart_stubs.py):
an entry point written by hand is never generated again."""

from __future__ import annotations

import re


def hand_written(sources: list[str], definition: re.Pattern[str]) -> set[str]:
    """The names `definition` (a pattern whose group 1 is the name) finds in `sources`."""
    names: set[str] = set()
    for path in sources:
        with open(path, encoding="utf-8") as f:
            names.update(definition.findall(f.read()))
    return names
