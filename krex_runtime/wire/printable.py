"""Text someone else chose (a label, an argv, a node's name, a reason that
quotes them), made safe to hand to a terminal: every character that would
act instead of show is written as its escape, so a label cannot set the
window's title, clear the screen, move the cursor or forge a row.

Escaped: the C0 controls and DEL (`\\x1b`, with `\\t`, `\\n`, `\\r` by their
names), the C1 controls (`\\x9b` starts a sequence on many terminals too),
the bidirectional overrides and isolates (they reorder what follows them on
the line), the line and paragraph separators, and lone surrogates (`\\udc80`:
not Unicode text, no encoding can write one). Everything else is kept as it
is, a backslash included, so ordinary labels and command lines read as
typed. Every `krex` view passes such strings through `printable`.
"""

from __future__ import annotations

import unicodedata
from typing import Any

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
# Bidirectional embeddings, overrides and isolates: they reorder the text that follows.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
# Cc: C0, DEL and C1 controls; Cs: surrogates; Zl, Zp: line and paragraph separators.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


def printable(value: Any) -> str:
    """`value` as text a terminal shows as it is (None and numbers as str() writes them)."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable() and text.isascii():  # the usual case, at C speed
        return text
    return "".join(_escaped(c) for c in text)


def _escaped(c: str) -> str:
    if c in _NAMED:
        return _NAMED[c]
    if c in _BIDI or unicodedata.category(c) in _ESCAPED_CATEGORIES:
        code = ord(c)
        return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
    return c
