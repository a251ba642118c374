"""Commands placed on a set of GPUs (`krex submit --gpus 2`, `--gpus 0,1`):
what such a submission may ask, and where the dispatcher puts it.

A command on a set runs as one tenant of every GPU of the set: it takes a
slot on each, meets each one's gate, is frozen by each one's regions, and
its own regions cover the whole set (regions/gpu_sets.py). It is placed only
where every GPU of the set has a free slot and is neither paused nor leased;
`--gpus N` takes the N least-loaded such GPUs (fewest running commands, then
lowest index), `--gpus I,J` exactly those.

Only process mode runs on a set: a zygote or a context process belongs to
one GPU. A set and a whole-device lease do not go together either (a lease
is one GPU's). A set is of one vendor: a process cannot drive an NVIDIA and
an AMD GPU through one runtime API, so on a mixed node `--gpus N` is placed
among GPUs of one vendor and `--gpus I,J` across vendors is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from krex_runtime.wire.protocol.bodies import SubmitBody
from krex_runtime.wire.protocol.envelope import ErrorCode, ProtocolError


@dataclass(frozen=True)
class GpuAsk:
    """A set of GPUs asked for: how many, and which when named."""

    count: int
    indices: tuple[int, ...] = ()  # (): any `count` of the node's GPUs

    def describe(self) -> str:
        return f"GPUs {','.join(map(str, self.indices))}" if self.indices else f"{self.count} GPUs"


def one_gpu(body: SubmitBody) -> int | None:
    """The one GPU a submission names, by `gpu` or as the only GPU of `gpus` (None: any)."""
    return body.gpu if body.gpu is not None or len(body.gpus) != 1 else body.gpus[0]


def set_size(body: SubmitBody) -> int:
    """How many GPUs a submission asks for: those it names, else its count (0 or 1: one GPU)."""
    return len(body.gpus) or body.gpu_count


def ask_of(body: SubmitBody, known: Mapping[int, str], mode: str) -> GpuAsk | None:
    """The set a submission asks for (None: one GPU, as before); `known`: the
    node's GPUs and their vendors. A bad_request or refused error that says why
    it cannot be had."""
    if body.gpus and body.gpu_count and body.gpu_count != len(body.gpus):
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"gpus names {len(body.gpus)} GPUs but gpu_count is {body.gpu_count}")
    if body.gpu_count < 0:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"gpu_count must be 1 or more, not {body.gpu_count}")
    indices = tuple(sorted(body.gpus))
    if len(set(indices)) != len(indices):
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"gpus names a GPU twice: {list(body.gpus)}")
    # Every GPU named must be one of the node's, one or several: a name it
    # lacks once ran the command on GPU 0.
    unknown = [i for i in indices if i not in known]
    if unknown:
        have = ", ".join(str(i) for i in sorted(known))
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"this node has no GPU {unknown[0]} (it has: {have})")
    count = set_size(body)
    if count <= 1:
        if indices and body.gpu is not None and body.gpu != indices[0]:
            raise ProtocolError(ErrorCode.BAD_REQUEST, f"gpu {body.gpu} and gpus {list(body.gpus)} disagree")
        return None
    if body.gpu is not None:
        raise ProtocolError(ErrorCode.BAD_REQUEST, "give gpu (one GPU) or gpus (a set), not both")
    if count > len(known):
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"{count} GPUs asked for; this node has {len(known)}")
    if len({known[i] for i in indices}) > 1:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"GPUs {','.join(map(str, indices))} are of different vendors: "
                            "a set of GPUs is of one vendor")
    most = max(sum(1 for v in known.values() if v == vendor) for vendor in set(known.values()))
    if count > most:
        raise ProtocolError(ErrorCode.BAD_REQUEST, f"{count} GPUs asked for; this node has at most {most} of one vendor")
    if mode != "process":
        raise ProtocolError(ErrorCode.REFUSED, f"a command on a set of GPUs runs in process mode, not {mode}")
    if body.lease:
        raise ProtocolError(ErrorCode.REFUSED, "a lease is of one GPU: a command on a set of GPUs cannot take one")
    return GpuAsk(count, indices)


def place(ask: GpuAsk, free: Collection[int], load: Callable[[int], int],
          vendor: Callable[[int], str] = lambda i: "") -> tuple[int, ...] | None:
    """The set to start on now, ascending, from the GPUs that can take it (`free`),
    or None when not enough of them (or not the named ones) are free. `--gpus N`
    takes the least-loaded N of one vendor (the least-loaded such set)."""
    if ask.indices:
        return ask.indices if all(i in free for i in ask.indices) else None
    sets = []
    for v in sorted({vendor(i) for i in free}):
        ranked = sorted((i for i in free if vendor(i) == v), key=lambda i: (load(i), i))
        if len(ranked) >= ask.count:
            sets.append(ranked[: ask.count])
    if not sets:
        return None
    chosen = min(sets, key=lambda c: (sum(load(i) for i in c), c))
    return tuple(sorted(chosen))
