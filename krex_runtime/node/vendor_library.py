"""A vendor's GPU management library (NVML, AMD SMI) held open while the
node's GPUs are discovered through it, and the operator's one line when it
cannot be opened: every discovery failure says what to do instead."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def library_open(init: Callable[[], object], shutdown: Callable[[], object], failure: type[BaseException],
                 error: type[Exception], library: str, driver: str, hint: str) -> Iterator[None]:
    """`init` the library, shut down when the block ends; a `failure` to
    start it is `error`, naming the library, the driver it needs and `hint`."""
    try:
        init()
    except failure as exc:
        raise error(f"{library} is not available ({exc}): no {driver} driver on this machine? {hint}") from None
    try:
        yield
    finally:
        shutdown()
