"""What a pooled command runs: its argv read as a Python entry point.

A pooled command runs inside a context process that already runs Python, so
its argv is not executed but read the way the interpreter would read it:

    python [-u] script.py ARGS      the script as __main__ (runpy.run_path)
    python [-u] -m module ARGS      the module as __main__ (runpy.run_module)
    python [-u] -c CODE ARGS        the code as __main__
    package.module:function ARGS    call function(), sys.argv = [entry, ARGS...]

The interpreter named in argv[0] is not started: the context process's own
Python runs the entry point. Anything else is refused at submit, so the
submitter learns at once rather than from a failed run.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from typing import Any

_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


class EntryError(ValueError):
    """argv that a context process cannot run; the message says what can."""


@dataclass(frozen=True)
class Entry:
    kind: str  # path | module | code | function
    target: str  # script path, module name, code, or "module:function"
    args: list[str]
    program: str  # argv[0] as given: Python's own messages name it
    unbuffered: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


USAGE = (
    "pooled commands run `python [-u] script.py ARGS`, `python [-u] -m module ARGS`, "
    "`python [-u] -c CODE ARGS` or `module:function ARGS`"
)


def parse_entry(argv: list[str]) -> Entry:
    if not argv:
        raise EntryError(f"no command given; {USAGE}")
    first = argv[0]
    if _FUNCTION.match(first):
        return Entry("function", first, list(argv[1:]), first)
    if not _PYTHON.match(os.path.basename(first)):
        raise EntryError(f"{first!r} is not a Python interpreter; {USAGE}")
    unbuffered = False
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-u":
            unbuffered = True
            i += 1
        elif arg in ("-m", "-c"):
            if i + 1 >= len(argv):
                raise EntryError(f"{arg} needs an argument; {USAGE}")
            kind = "module" if arg == "-m" else "code"
            return Entry(kind, argv[i + 1], list(argv[i + 2 :]), first, unbuffered)
        elif arg.startswith("-"):
            raise EntryError(f"interpreter option {arg!r} is not supported in pooled mode; {USAGE}")
        else:
            return Entry("path", arg, list(argv[i + 1 :]), first, unbuffered)
    raise EntryError(f"no script given; {USAGE}")
