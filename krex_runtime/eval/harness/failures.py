"""What went wrong, as the contract's failure classes (docs/evaluation.md):
a class, a one-line message and a detail of at most 20 lines (the
compiler's last lines for a build error, the traceback's tail otherwise).

A build error is recognised by what the builders raise: torch's load_inline
a RuntimeError "Error building extension '<name>'..." whose text carries
ninja's and the compiler's output, Python a SyntaxError, Triton a
CompilationError (triton.compiler.errors). Out of memory is
torch.cuda.OutOfMemoryError, or a RuntimeError saying "out of memory" (what
older torch and the CUDA runtime raise).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

COMPILE_ERROR = "compile_error"
RUNTIME_ERROR = "runtime_error"
WRONG_SHAPE = "wrong_shape"
WRONG_DTYPE = "wrong_dtype"
INCORRECT = "incorrect"
OUT_OF_MEMORY = "out_of_memory"
CLASSES = (COMPILE_ERROR, RUNTIME_ERROR, WRONG_SHAPE, WRONG_DTYPE, INCORRECT, "timeout", OUT_OF_MEMORY,
           "integrity_flagged")

DETAIL_LINES = 20
LINE_CHARS = 400
BUILD_MARKER = "Error building extension"


@dataclass(frozen=True)
class Failure:
    kind: str
    message: str
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"class": self.kind, "message": self.message, "detail": self.detail}


class Stop(Exception):
    """Ends the evaluation with `failure`: what was reached so far is reported."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def tail(text: str, lines: int = DETAIL_LINES) -> str:
    kept = [line.rstrip()[:LINE_CHARS] for line in text.rstrip().splitlines()[-lines:]]
    return "\n".join(kept)


def _names(exc: BaseException) -> set[str]:
    return {c.__name__ for c in type(exc).__mro__}


def is_build_error(exc: BaseException) -> bool:
    if isinstance(exc, SyntaxError) or "CompilationError" in _names(exc):
        return True
    return isinstance(exc, RuntimeError) and str(exc).lstrip().startswith(BUILD_MARKER)


def is_out_of_memory(exc: BaseException) -> bool:
    return "OutOfMemoryError" in _names(exc) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def _traceback_tail(exc: BaseException) -> str:
    return tail("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _build_failure(exc: BaseException, where: str) -> Failure:
    if isinstance(exc, SyntaxError):
        at = f"{exc.filename}:{exc.lineno}" if exc.lineno else str(exc.filename)
        return Failure(COMPILE_ERROR, one_line(f"{where}: SyntaxError: {exc.msg} ({at})"), _traceback_tail(exc))
    text = str(exc)
    # The builder's output (ninja's, the compiler's) is in the exception's text: its end says why.
    detail = tail(text) if len(text.splitlines()) > 1 else _traceback_tail(exc)
    head = text.split(":", 1)[0] if text.startswith(BUILD_MARKER) else _first_line(exc)
    return Failure(COMPILE_ERROR, one_line(f"{where}: {head}"), detail)


def classify(exc: BaseException, where: str, default: str = RUNTIME_ERROR) -> Failure:
    """`exc`, raised while doing `where` ("import", "construction", "forward"...),
    as a failure: a build error is compile_error and running out of memory
    out_of_memory wherever they happen; anything else is `default`."""
    if is_build_error(exc):
        return _build_failure(exc, where)
    if is_out_of_memory(exc):
        return Failure(OUT_OF_MEMORY, one_line(f"{where}: {_first_line(exc)}"), _traceback_tail(exc))
    return Failure(default, one_line(f"{where}: {_first_line(exc)}"), _traceback_tail(exc))
