"""External subcommands, as git has them: `krex NAME ARGS...` runs the
program `krex-NAME` with ARGS in krex's place, so krex imports none of
them (`krex bench` is krex_bench's own `krex-bench`; a contract keeps
krex_runtime from importing krex_bench).

The program is looked for beside the Python running krex (where the
package put its scripts), then on PATH; where the package is used from a
checkout without installing it, this Python runs its module instead. Shell
completion goes on into the program the same way: argcomplete is told
where its words begin.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

# Each external subcommand, and the module `python -m` runs for it from a checkout.
EXTERNAL = {"bench": "krex_bench"}


class NotInstalled(Exception):
    """No program for an external subcommand."""


def command_of(name: str, beside: Path | None = None, search_path: str | None = None) -> list[str]:
    """The argv that runs `krex NAME`'s program (search_path: PATH's value, default the environment's)."""
    program = f"krex-{name}"
    here = (beside or Path(sys.executable).parent) / program
    if here.is_file() and os.access(here, os.X_OK):
        return [str(here)]
    found = shutil.which(program, path=search_path)
    if found:
        return [found]
    if importlib.util.find_spec(EXTERNAL[name]) is not None:
        return [sys.executable, "-m", EXTERNAL[name]]
    raise NotInstalled(
        f"`krex {name}` runs the program {program}, found neither beside {sys.executable} nor on PATH "
        f"(it comes with the krex-runtime package: install it again)"
    )


def run(name: str, args: list[str]) -> NoReturn:
    """Become `krex NAME`'s program: its output, its exit status (NotInstalled if there is none)."""
    argv = command_of(name)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], [*argv, *args])


def complete_in_program(parser: argparse.ArgumentParser) -> None:
    """While the shell asks krex for completions (argcomplete's environment):
    when the words name an external subcommand, let its program answer,
    told that its own words begin at that subcommand. Returns otherwise."""
    import argcomplete

    words = argcomplete.split_line(os.environ.get("COMP_LINE", ""), int(os.environ.get("COMP_POINT", "0")))[3]
    start = int(os.environ["_ARGCOMPLETE"]) - 1  # where krex's own words begin (after `python -m ...`)
    at = _subcommand_at(parser, words[start:])
    if at is None or words[start + at] not in EXTERNAL:
        return
    os.environ["_ARGCOMPLETE"] = str(start + at + 1)
    try:
        run(words[start + at], [])
    except NotInstalled:
        return  # nothing to offer


def _subcommand_at(parser: argparse.ArgumentParser, words: list[str]) -> int | None:
    """The index of the subcommand among krex's words (the first after
    krex's own options and their values), None when there is none yet."""
    i = 1
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            return i
        action = parser._option_string_actions.get(word)
        takes_value = action is not None and action.nargs is None and action.option_strings and "=" not in word
        i += 2 if takes_value else 1
    return None
