"""KREX runtime: region-granular GPU exclusivity for concurrent kernel benchmarking.

The folders are the parts (docs/architecture.md draws them): wire (what
clients and the console speak), api (the Python client of a runtime), node
(configuration, GPUs, files), transport (the one place a client opens a
socket to a runtime), host (cgroups, process trees, identities,
the tenant registry, fair share), commands (running tenants) and regions
(exclusivity) side by side on it, telemetry, service (the process that ties them together),
tenant (code that runs inside tenants), sim (the simulated driver's
bindings), testing and demo (support, not the service).

Kept free of imports: every tenant imports this package for `region()`.
`Client` and `AsyncClient` (krex_runtime.api, which needs pyzmq) load only
when first named.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["AsyncClient", "Client"]
_LAZY = set(__all__)


def __getattr__(name: str) -> Any:
    if name in _LAZY:  # by name, so the package itself depends on no layer (import-linter reads imports)
        return getattr(importlib.import_module("krex_runtime.api"), name)
    raise AttributeError(f"module 'krex_runtime' has no attribute {name!r}")
