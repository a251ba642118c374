"""What every tenant process is started with: its environment, cgroup slice,
cores and user. One builder serves commands and context processes alike.

The environment names the tenant's command and GPU, points it at the
read-only control socket (tenants may only read), preloads the interception
library, puts KREX's tenant-side code on PYTHONPATH (tenant/python_path.py:
`import krex_runtime.client` works in whatever Python the command runs; with
auto-regions its start-up hook goes first, tenant/auto_region.py), and
under policy krex hands it its GPU's gate, the region socket and its region
token. The variable names come from krex_runtime/tenant/env.py,
which the tenant-side code reads.

Under policy krex every tenant (a process or forked command, a context
process) also gets its own entries in its GPU's gate before it starts and
loses them after its processes have ended (`TenantSetup.admit`, `dismiss`);
with `tenants.uid_range` it gets its own uid too (host/identities.py).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from krex_runtime.commands.build_folders import BuildFolders
from krex_runtime.host.cgroups import CgroupSlice
from krex_runtime.host.identities import Identities, Identity
from krex_runtime.node.access import RunAs, TenantUser
from krex_runtime.node.gpus import Gpu
from krex_runtime.node.native_build import hip_library
from krex_runtime.tenant import env as names
from krex_runtime.tenant import python_path


class TokenSource(Protocol):
    def token_for(self, tenant_id: int) -> str: ...


class AdmitError(Exception):
    """A tenant that cannot be given what it must start with; one line."""


class TenantGates(Protocol):
    """The gates' side of a tenant's life (regions/machinery.py): its entries
    file, writable by its uid (`owner`, else the tenants' user) and the runtime."""

    def admit(self, gpu: int, tenant_id: int, owner: Identity | None) -> None: ...

    def dismiss(self, gpu: int, tenant_id: int) -> None: ...


@dataclass(frozen=True)
class RegionAccess:
    """Where tenants find regions (policy krex only)."""

    gates: dict[int, Path]  # GPU index -> its gate file
    socket: Path
    tokens: TokenSource


@dataclass(frozen=True)
class TenantEnvironment:
    extra: dict[str, str]  # tenants.env of the configuration
    endpoint: str  # the read-only control socket
    run_dir: Path
    user_env: dict[str, str]  # HOME, USER... of the tenants' user, when one is set
    library: Path | None  # the interception library to preload (None: tenants run unprotected)
    regions: RegionAccess | None
    simulator: dict[str, str]  # simulated GPUs: the simulator's settings (empty on real GPUs)
    simulator_dir: Path | None
    python_dir: Path = field(init=False)
    compile_slots: Path | None = None  # commands/compile_slots.py  # tenant/python_path.py: on every tenant's PYTHONPATH

    def __post_init__(self) -> None:
        object.__setattr__(self, "python_dir", python_path.prepare(self.run_dir))

    def build(
        self, command_id: str, tenant_id: int | None, command_env: dict[str, str], gpu: Gpu,
        identity: Identity | None = None, more: tuple[Gpu, ...] = (),
    ) -> dict[str, str]:
        """The environment of one tenant. A context process gets it too, under
        its own id (its commands' ids are mapped to it by the runtime, never
        read from its environment). `more`: the rest of a set of GPUs the
        command is placed on (`gpu` first): it sees them all and meets every
        one's gate."""
        env = dict(os.environ)
        env.update(self.extra)
        env.update(command_env)
        if gpu.vendor == "amd":  # the runtime's own CUDA_VISIBLE_DEVICES is not this tenant's
            env.pop("CUDA_VISIBLE_DEVICES", None)
        env.update(gpu.visibility_env)
        if more:  # a set of GPUs (of one vendor: placement refuses a mixed set): all of them visible
            for name in gpu.visibility_env:
                env[name] = ",".join(g.visibility_env[name] for g in (gpu, *more))
        env.update(
            {
                names.GPU_VENDOR: gpu.vendor,
                names.GPU: str(gpu.index),
                names.GPU_UUID: gpu.uuid,
                names.COMMAND_ID: command_id,
                names.TENANT_ID: str(tenant_id),
                names.ENDPOINT: self.endpoint,
                names.RUN_DIR: str(self.run_dir),
            }
        )
        if self.compile_slots is not None:
            env[names.COMPILE_SLOTS] = str(self.compile_slots)
        if more:
            env[names.GPUS] = ",".join(str(g.index) for g in (gpu, *more))
        env.update(self.user_env)
        if identity is not None:
            name = f"tenant{identity.uid}"
            env.update({"HOME": str(identity.home), "USER": name, "LOGNAME": name})
        # Last: a PYTHONPATH the command brings keeps its place in front.
        env["PYTHONPATH"] = _prepend(env.get("PYTHONPATH", ""), str(self.python_dir), os.pathsep)
        if env.get(names.AUTO_REGION) == "1":
            # Before anything: the first sitecustomize on the path is the only one run.
            startup = python_path.startup_folder(self.python_dir)
            env["PYTHONPATH"] = _prepend(str(startup), env["PYTHONPATH"], os.pathsep)
        if self.library is not None:
            # The HIP library for an AMD GPU's tenants, built beside libkrex.so.
            library = hip_library(self.library) if gpu.vendor == "amd" else self.library
            env["LD_PRELOAD"] = _prepend(str(library), env.get("LD_PRELOAD", ""), " ")
        if self.regions is not None:
            env[names.GATE_PATH] = str(self.regions.gates[gpu.index])
            if more:
                env[names.GATE_SET] = ":".join(str(self.regions.gates[g.index]) for g in (gpu, *more))
            env[names.REGION_SOCKET] = str(self.regions.socket)
            if tenant_id is not None:
                env[names.REGION_TOKEN] = self.regions.tokens.token_for(tenant_id)
        if gpu.simulated and self.simulator_dir is not None:
            env["LD_LIBRARY_PATH"] = _prepend(str(self.simulator_dir), env.get("LD_LIBRARY_PATH", ""), ":")
            env.update(self.simulator)
        return env


def _prepend(first: str, rest: str, sep: str) -> str:
    return sep.join(p for p in (first, rest) if p)


@dataclass
class TenantSetup:
    """Everything a tenant process is started with besides its command."""

    env: TenantEnvironment
    cgroups: CgroupSlice | None
    cores: dict[int, tuple[int, ...]]  # GPU index -> the cores its tenants may use (empty: any)
    run_as: RunAs | None
    gates: TenantGates | None = None  # policy krex
    identities: Identities | None = None  # tenants.uid_range
    # Forwarded mode's context servers, which serve one tenant after another:
    # never a tenant's uid (None: the runtime's own user; node/access.server_run_as).
    server_run_as: RunAs | None = None
    builds: BuildFolders | None = None  # each tenant's build folders (commands/build_folders.py)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_tenant_id(self) -> int:
        return next(self._ids)

    def admit(self, gpu: int, tenant_id: int, more: tuple[int, ...] = ()) -> Identity | None:
        """Before a tenant starts: its uid (with a range) and its gate entries (in
        the gate of every GPU of its set, `more` the rest of it). AdmitError says
        why it cannot start."""
        identity = None
        if self.identities is not None:
            identity = self.identities.take()
            if identity is None:
                raise AdmitError(f"all {self.identities.count} uids of tenants.uid_range are in use")
        if self.gates is not None:
            admitted: list[int] = []
            try:
                for index in (gpu, *more):
                    self.gates.admit(index, tenant_id, identity)
                    admitted.append(index)
            except OSError as exc:
                for index in admitted:
                    self.gates.dismiss(index, tenant_id)
                if identity is not None and self.identities is not None:
                    self.identities.give_back(identity)
                raise AdmitError(f"cannot make its gate entries: {exc.strerror or exc}") from None
        return identity

    def dismiss(self, gpu: int, tenant_id: int, identity: Identity | None, more: tuple[int, ...] = ()) -> None:
        """After a tenant's processes have all ended."""
        if self.gates is not None:
            for index in (gpu, *more):
                self.gates.dismiss(index, tenant_id)
        if identity is not None and self.identities is not None:
            self.identities.give_back(identity)

    def run_as_for(self, identity: Identity | None) -> RunAs | None:
        """What a tenant takes on between fork and exec: its own uid, or the tenants' user."""
        if identity is None or self.run_as is None:
            return self.run_as
        user = TenantUser(f"tenant{identity.uid}", identity.uid, identity.gid, str(identity.home))
        return RunAs(user, self.run_as.umask, (identity.group,))

    def owner_of(self, identity: Identity | None) -> tuple[int, int]:
        """The uid and gid a tenant runs as: its own, the tenants' user's, or the runtime's."""
        run_as = self.run_as_for(identity)
        if run_as is None or run_as.user is None:
            return os.getuid(), os.getgid()
        return run_as.user.uid, run_as.user.gid

    def cores_of(self, gpu: int) -> tuple[int, ...]:
        return self.cores.get(gpu, ())
