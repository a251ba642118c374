"""How a command is to run: `SubmitOptions`, the one options type of
`submit`, `run`, `map` and `enqueue` (both clients, and `krex run` and
`krex submit` through them), the `submit` body it makes, and `Command`, one
item of `map`.

The body inherits the caller's cwd and environment, as `krex` does; `mode`
and `auto_region` are sent only when given: the runtime decides which modes
exist and refuses what it cannot do.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

# Called with ("stdout" | "stderr", text) as a followed command writes.
OutputCallback = Callable[[str, str], None]


@dataclass(frozen=True)
class SubmitOptions:
    """The options of `submit` (docs/api.md, "The options of run and submit").

    timeout: its wall-time limit in seconds (state `timeout`, exit status 124).
    env: its whole environment (default: this process's, as `krex` sends).
    cwd: its working folder (default: this process's).
    on_output(stream, text): called with its output as it arrives.
    """

    gpu: int | None = None
    mode: str | None = None
    timeout: float | None = None
    env: Mapping[str, str] | None = None
    cwd: str | os.PathLike[str] | None = None
    label: str | None = None
    auto_region: bool | None = None
    auto_region_entries: Sequence[str] | None = None
    share: str | None = None
    # What a cluster places by (docs/protocol.md); sent only when given.
    node_labels: Mapping[str, str] | None = None
    gpu_model: str | None = None
    retries: int | None = None
    lease: bool = False
    on_output: OutputCallback | None = None
    # A set of GPUs (docs/api.md, "Regions over several GPUs"): how many, or which.
    # Last, so that Command(argv, gpu, mode, ...) keeps its positional order.
    gpus: int | Sequence[int] | None = None

    def body(self, argv: Sequence[str], *, attach: bool) -> dict[str, Any]:
        """The `submit` request's body; `attach`: the runtime pushes the
        command's output and result to this connection."""
        if isinstance(argv, (str, bytes)):
            raise TypeError("argv is a list of strings (e.g. ['python3', 'bench.py']), not one string")
        args = [os.fspath(a) for a in argv]
        if not args:
            raise ValueError("no command given: argv is empty")
        body: dict[str, Any] = {
            "argv": args,
            "gpu": self.gpu,
            "timeout_s": self.timeout,
            "cwd": os.fspath(self.cwd) if self.cwd is not None else os.getcwd(),
            "env": dict(os.environ if self.env is None else self.env),
            "label": self.label or "",
            "attach": attach,
            "lease": self.lease,
        }
        if self.gpus is not None:
            gpus = self.gpus
            if isinstance(gpus, bool) or not isinstance(gpus, (int, Sequence)) or isinstance(gpus, (str, bytes)):
                raise TypeError("gpus is a number of GPUs (2) or a list of GPU indices ([0, 1])")
            if isinstance(gpus, int):
                body["gpu_count"] = gpus
            else:
                body["gpus"] = [int(g) for g in gpus]
        if self.mode is not None:
            body["mode"] = self.mode
        if self.auto_region is not None:
            body["auto_region"] = self.auto_region
        if self.auto_region_entries:
            body["auto_region_entries"] = list(self.auto_region_entries)
        if self.share:
            body["share"] = self.share
        if self.node_labels:
            body["node_labels"] = dict(self.node_labels)
        if self.gpu_model:
            body["gpu_model"] = self.gpu_model
        if self.retries:
            body["retries"] = self.retries
        return body

    def over(self, common: SubmitOptions) -> SubmitOptions:
        """These options over `common` ones: what is left at its default here takes the common value."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(SubmitOptions)
               if getattr(self, f.name) != f.default}
        return dataclasses.replace(common, **own)


@dataclass(frozen=True)
class _Argv:
    argv: Sequence[str]


# argv first (a base class's fields come before its subclass's), then the
# options in their order: Command(argv, gpu, mode, ...) reads as it always has.
@dataclass(frozen=True)
class Command(SubmitOptions, _Argv):
    """One command for `map` (or `submit(**vars(command))`): argv and the same options as `run`."""


def split(item: Command | Sequence[str], common: SubmitOptions) -> tuple[Sequence[str], SubmitOptions]:
    """argv and submit options of one `map` item: its own options over the common ones."""
    if isinstance(item, Command):
        return item.argv, item.over(common)
    return item, common


F = TypeVar("F", bound=Callable[..., Any])


def takes_options(fn: F) -> F:
    """Name SubmitOptions' fields as the keyword parameters of a call that
    takes them as `**options` (help(), inspect and editors show them)."""
    signature = inspect.signature(fn)
    fixed = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    named = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
             for f in dataclasses.fields(SubmitOptions)]
    fn.__signature__ = signature.replace(parameters=fixed + named)  # type: ignore[attr-defined]
    return fn
