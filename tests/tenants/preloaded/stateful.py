"""A stand-in for a framework's process-wide state, preloaded in the isolation
tests (CI has no torch). It has the kinds of state torch has:

  - module attributes: FACTOR (a plain setting, like a flag), activation (a
    function, like torch.nn.functional.gelu, that a command may monkeypatch)
  - a class attribute: Config.precision (like a method patched on torch.Tensor)
  - a setting behind a setter/getter pair, invisible as a module attribute:
    set_mode / get_mode (like torch.set_default_dtype), declared to the
    context process through __krex_state__
  - a flag read on every use, like torch.backends.cuda.matmul.allow_tf32:
    set_fast_math / get_fast_math, declared with its setter in `put_back`,
    so the context process sets it back instead of retiring
  - a random generator with a fixed default seed (like torch's), whose state
    a fresh process always starts from: rand / manual_seed
"""

import random

FACTOR = 1.0


def activation(x: float) -> float:
    return max(x, 0.0)


class Config:
    precision = "highest"


_settings = {"mode": "default"}


def set_mode(mode: str) -> None:
    _settings["mode"] = mode


def get_mode() -> str:
    return _settings["mode"]


_flags = {"fast_math": False}


def set_fast_math(on: bool) -> None:
    _flags["fast_math"] = on


def get_fast_math() -> bool:
    return _flags["fast_math"]


DEFAULT_SEED = 1234
_generator = random.Random(DEFAULT_SEED)


def rand() -> float:
    return _generator.random()


def manual_seed(seed: int) -> None:
    _generator.seed(seed)


__krex_state__ = {
    "settings": lambda: {"mode": get_mode(), "fast_math": get_fast_math()},
    "put_back": {"fast_math": set_fast_math},
    "get_rng_state": _generator.getstate,
    "set_rng_state": _generator.setstate,
}
