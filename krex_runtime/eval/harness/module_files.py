"""A problem or candidate file: its bytes' sha256 and the file run as a fresh
module. The module is made from the bytes that were hashed (not the path read
again), under a name of its own, so that the hash names exactly what ran and
two files of one name never meet in sys.modules."""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
import types
from dataclasses import dataclass

_serial = itertools.count()


@dataclass(frozen=True)
class SourceFile:
    path: str
    data: bytes

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


class MissingName(Exception):
    """A file that does not define what its role needs; one line."""


def read(path: str) -> SourceFile:
    with open(path, "rb") as f:
        return SourceFile(path, f.read())


def load(source: SourceFile, role: str) -> types.ModuleType:
    """Run `source` as a new module named after its role. Whatever the file
    raises (a SyntaxError included) comes out as is: the caller classifies it."""
    name = f"krex_eval_{role}_{next(_serial)}"
    module = types.ModuleType(name)
    module.__file__ = os.path.abspath(source.path)
    # Registered first, as importlib does: a dataclass or pickle in the file looks itself up by name.
    sys.modules[name] = module
    code = compile(source.data, module.__file__, "exec")
    exec(code, module.__dict__)
    return module


def need(module: types.ModuleType, source: SourceFile, *names: str) -> None:
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise MissingName(f"{source.name} does not define {', '.join(missing)}")
