"""Process-wide settings and random generators of the frameworks a process imported.

A framework keeps state that no module attribute shows: torch's default
dtype, its tf32 and cuDNN switches, its thread count, its generators' states
live in C++. Each framework here is read through its own getters:
`settings()` gives name -> value (compared after each pooled command; a
difference retires the context process, unless `put_back` names the
setting), `save_rng`/`restore_rng` put its
generators back to the state of a fresh process, `reseed` seeds from the OS
what a fresh process seeds from the OS.

Known frameworks are read when they are imported (torch, NumPy, Python's
`random`); any other module can take part by defining `__krex_state__`, a
mapping with any of "settings" (a callable returning a dict), "put_back" (a
dict: setting -> its setter, or None where it follows from the others;
anything but a dict puts nothing back),
"get_rng_state" and "set_rng_state" (a pair), "reseed" (a callable).

`put_back` is only for settings that are read on every use and from which
nothing is built or cached (torch's matmul and cuDNN precision flags: each
matmul reads them when it calls cuBLAS): set back to the baseline's value, the
next command sees what a fresh process sees. A setting whose value shaped
something that outlives the command (cudnn.benchmark fills an algorithm
cache) is never put back: it retires the process. Nothing here imports a
framework: a module that is not in sys.modules is not read.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

Getter = Callable[[], Any]


@dataclass(frozen=True)
class Framework:
    name: str
    settings: Callable[[], dict[str, Any]]
    # Setting -> its setter; None: it follows from the others (torch's
    # float32_matmul_precision from fp32_precision). Put back, then read
    # again to verify.
    put_back: dict[str, Callable[[Any], None] | None] = field(default_factory=dict)
    # Of those, the ones set only when setting the others did not bring every
    # reading back (torch's legacy allow_tf32 where fp32_precision exists).
    fallback: frozenset[str] = frozenset()
    save_rng: Callable[[], Any] | None = None
    restore_rng: Callable[[Any], None] | None = None
    reseed: Callable[[], None] | None = None


def _read(getters: dict[str, Getter]) -> dict[str, Any]:
    """Each getter's value; one that this version lacks (or that fails) is left out."""
    values = {}
    for name, get in getters.items():
        try:
            values[name] = get()
        except Exception:
            continue
    return values


# --- torch ------------------------------------------------------------------------

_TORCH_MATMUL = (
    "allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
    "allow_fp16_accumulation", "fp32_precision",
)
# torch's default_rng_seed_val: the seed of a generator that does not seed from the OS.
_TORCH_FIXED_SEED = 67280421310721
_TORCH_CUDNN = ("enabled", "benchmark", "benchmark_limit", "deterministic", "allow_tf32", "fp32_precision")
# Below torch.backends ("" is torch.backends itself); cuda.matmul and cudnn are read above.
_TORCH_FP32_PRECISION_NODES = ("", "cudnn.conv", "cudnn.rnn", "mkldnn", "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn")


def _attr_path(root: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        root = getattr(root, part)
    return root


def _called(owner: Any, name: str) -> str:
    """What `owner.name()` returns now, as text."""
    return str(getattr(owner, name)())


def _fp32_precision(root: Any, path: str) -> Any:
    return _attr_path(root, path).fp32_precision


def _torch(torch: Any) -> Framework:
    # Each getter looks its function up when called: a torch without one of
    # them (an older version) just has that setting left out.
    calls = (
        "get_default_dtype", "get_float32_matmul_precision", "are_deterministic_algorithms_enabled",
        "is_deterministic_algorithms_warn_only_enabled", "get_num_threads", "get_num_interop_threads",
        "is_anomaly_enabled", "is_anomaly_check_nan_enabled", "is_grad_enabled", "is_inference_mode_enabled",
        "get_default_device",
    )
    getters: dict[str, Getter] = {f"torch.{name}()": partial(_called, torch, name) for name in calls}
    for name in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled",
                 "preferred_linalg_library"):
        getters[f"torch.backends.cuda.{name}()"] = partial(_called, torch.backends.cuda, name)
    for attr in _TORCH_MATMUL:
        getters[f"torch.backends.cuda.matmul.{attr}"] = partial(getattr, torch.backends.cuda.matmul, attr)
    for attr in _TORCH_CUDNN:
        getters[f"torch.backends.cudnn.{attr}"] = partial(getattr, torch.backends.cudnn, attr)
    getters["torch.backends.mkldnn.enabled"] = lambda: torch.backends.mkldnn.enabled
    # The fp32_precision API's other nodes (compared, never put back): a
    # command that set one of them and then put the matmul flags back as
    # they were must still retire its process.
    for path in _TORCH_FP32_PRECISION_NODES:
        getters[f"torch.backends.{path}.fp32_precision" if path else "torch.backends.fp32_precision"] = (
            partial(_fp32_precision, torch.backends, path)
        )
    getters["torch.cuda.current_device()"] = (
        lambda: torch.cuda.current_device() if torch.cuda.is_initialized() else None
    )

    def generators() -> list[Any]:
        cuda = list(torch.cuda.default_generators) if torch.cuda.is_initialized() else []
        return [torch.default_generator, *cuda]

    def save() -> Any:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        return torch.get_rng_state(), cuda

    def restore(saved: Any) -> None:
        cpu, cuda = saved
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)

    def reseed() -> None:
        # Which of torch's generators a fresh process seeds from the OS
        # depends on the version (the CPU one does in current releases, CUDA
        # ones have started from a fixed seed): each generator's own seed
        # says. One on the fixed seed was put back to the baseline (restore);
        # one that is not gets a new seed from the OS, as a fresh process
        # would, so no two commands share its stream.
        for gen in generators():
            if gen.initial_seed() != _TORCH_FIXED_SEED:
                gen.seed()

    put_back, fallback = _torch_put_back(torch)
    return Framework("torch", lambda: _read(getters), put_back, fallback, save, restore, reseed)


def _torch_put_back(torch: Any) -> tuple[dict[str, Callable[[Any], None] | None], frozenset[str]]:
    """The precision flags each matmul and convolution reads when it is called
    (their cuDNN algorithm cache is keyed by them too), each with its own
    setter; float32_matmul_precision follows from cuda.matmul's
    fp32_precision where torch has that API. Where it does, the legacy
    allow_tf32 is a fallback: the new API alone is set first (what brings a
    new-API change back on torch 2.11), and only if a reading still differs
    are all of them set, legacy first (after a legacy set, setting the new
    API alone leaves torch refusing to read the legacy flag, "mix of the
    legacy and new APIs"; legacy then new reads back as the baseline on
    torch 2.13)."""
    out: dict[str, Callable[[Any], None] | None] = {}
    fallback = set()
    for module, name in ((torch.backends.cuda.matmul, "torch.backends.cuda.matmul"),
                         (torch.backends.cudnn, "torch.backends.cudnn")):
        for attr in _TORCH_MATMUL if module is torch.backends.cuda.matmul else ("allow_tf32", "fp32_precision"):
            out[f"{name}.{attr}"] = partial(setattr, module, attr)
        if hasattr(module, "fp32_precision"):
            fallback.add(f"{name}.allow_tf32")
    new_api = "torch.backends.cuda.matmul.allow_tf32" in fallback
    out["torch.get_float32_matmul_precision()"] = None if new_api else torch.set_float32_matmul_precision
    return out, frozenset(fallback)


# --- NumPy and Python's random -------------------------------------------------------


def _numpy(np: Any) -> Framework:
    getters: dict[str, Getter] = {
        "numpy.geterr()": np.geterr,
        "numpy.getbufsize()": np.getbufsize,
        "numpy.get_printoptions()": lambda: {k: v for k, v in np.get_printoptions().items() if not callable(v)},
    }
    rnd = sys.modules.get("numpy.random")
    reseed = (lambda: rnd.seed()) if rnd is not None and hasattr(rnd, "seed") else None
    return Framework("numpy", lambda: _read(getters), reseed=reseed)


def _random(rnd: Any) -> Framework:
    return Framework("random", dict, reseed=rnd.seed)


def _declared(name: str, state: Any) -> Framework:
    settings = state.get("settings") or dict
    get, set_ = state.get("get_rng_state"), state.get("set_rng_state")
    declared = state.get("put_back")
    # A malformed declaration puts nothing back (its settings retire when they change).
    put_back = {f"{name}.{k}": v for k, v in declared.items() if v is None or callable(v)} if isinstance(declared, dict) else {}
    return Framework(
        name, lambda: {f"{name}.{k}": v for k, v in settings().items()}, put_back, frozenset(),
        get if get and set_ else None, set_ if get and set_ else None, state.get("reseed"),
    )


KNOWN: dict[str, Callable[[Any], Framework]] = {"torch": _torch, "numpy": _numpy, "random": _random}


def frameworks() -> list[Framework]:
    """The frameworks this process has imported, known ones and declared ones."""
    found = [make(sys.modules[name]) for name, make in KNOWN.items() if name in sys.modules]
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType):
            continue
        state = vars(module).get("__krex_state__")
        if isinstance(state, dict):
            found.append(_declared(name, state))
    return found


def reseed_all(found: list[Framework]) -> None:
    """Seed from the OS what a fresh process seeds from the OS."""
    for f in found:
        if f.reseed is not None:
            try:
                f.reseed()
            except Exception:
                continue
