"""What the runtime claims and prepares on its host before it serves: the run
folder and its access, the claims that keep a second runtime off these GPUs,
the tenants' user, the CURVE keys, the command cgroups, and the recovery of
whatever a previous run left frozen or gated."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import krex_runtime
from krex_runtime.commands import tenant_reports
from krex_runtime.commands.forwarded import forward_ring
from krex_runtime.host import cgroups
from krex_runtime.host.cgroups import CgroupSlice
from krex_runtime.host.identities import Identities
from krex_runtime.node import access, native_build
from krex_runtime.node.config import Config, resolve_lock_dir, resolve_run_dir
from krex_runtime.node.gpus import Gpu
from krex_runtime.node.locks import Claim, ClaimError, claim
from krex_runtime.regions import machinery
from krex_runtime.service import curve
from krex_runtime.sim import device_file
from krex_runtime.wire.protocol import endpoints

log = logging.getLogger("krex.runtime")

WATCHDOG = "krex-runtime watchdog"  # how the watchdog names itself in the run folder's claim


class StartupError(Exception):
    """The runtime cannot start; the message is one line for the operator."""


@dataclass
class Host:
    run_dir: Path
    output_dir: Path
    library: Path  # the interception library tenants preload
    tenant_user: access.TenantUser | None
    run_as: access.RunAs
    curve_keys: curve.ServerKeys | None
    cgroup_slice: CgroupSlice | None
    recovered: list[str]  # what recovery did, one line each
    claims: list[Claim] = field(default_factory=list)
    identities: Identities | None = None  # tenants.uid_range: a uid of its own per tenant
    simulated_device: str | None = None  # the simulated device this runtime owns (None: real GPUs)
    server_run_as: access.RunAs | None = None  # forwarded mode's context servers (None: the runtime's user)

    @property
    def cgroups(self) -> str | None:
        """The command cgroups' folder, as status and runtime_started show it."""
        return str(self.cgroup_slice.path) if self.cgroup_slice is not None else None

    def release(self) -> None:
        """Remove the command cgroups' slice (ending what is left in it), then
        give back the claims: the last things a runtime lets go of."""
        if self.identities is not None:
            self.identities.close()
        if self.cgroup_slice is not None:
            self.cgroup_slice.remove()
            self.cgroup_slice = None
        if self.simulated_device is not None:  # its tenants have ended: nothing of this run stays in /dev/shm
            device_file.remove_device(self.simulated_device)
            # Unlinked while still locked: a runtime that opened it meanwhile was refused, a later one makes its own.
            Path(device_file.claim_path(self.simulated_device)).unlink(missing_ok=True)
        for c in self.claims:
            c.release()
        self.claims.clear()


def prepare(config: Config, gpus: list[Gpu]) -> Host:
    """Claim the run folder and the GPUs, and make the host ready for tenants;
    StartupError (with every claim released) when it cannot."""
    run_dir = resolve_run_dir(config)
    # Nothing the runtime creates is open to other users until it says so;
    # tenants get the umask it was started with back.
    umask = os.umask(access.RUNTIME_UMASK)
    try:
        tenant_user = access.tenant_user(config)
        server_as = access.server_run_as(config, tenant_user, umask)
        curve_keys = curve.server_keys(config.runtime)
        access.prepare_run_dir(run_dir, access.run_dir_access(config, tenant_user is not None))
    except (access.AccessError, curve.CurveError) as exc:
        raise StartupError(str(exc)) from None
    claims: list[Claim] = []
    try:
        info = f"krex-runtime pid {os.getpid()} (run dir {run_dir})"
        claims.append(_claim_run_dir(run_dir, info))
        lock_dir = resolve_lock_dir(config)
        for gpu in gpus:
            claims.append(claim(lock_dir / f"gpu-{gpu.uuid}.lock", f"GPU {gpu.index} ({gpu.uuid})", info))
        if gpus and gpus[0].simulated:
            claims.append(_own_simulated_device(config.gpus.simulated_device, tenant_user, info))
        return _prepare_claimed(config, gpus, run_dir, tenant_user, access.RunAs(tenant_user, umask), curve_keys,
                                claims, server_as)
    except BaseException:
        for c in claims:
            c.release()
        raise


def _own_simulated_device(name: str, tenant_user: access.TenantUser | None, info: str) -> Claim:
    """A simulated device serves one runtime at a time, whatever its lock
    folder: the claim beside the device file keeps a second runtime off it (a
    runtime sharing it would see the other's tenants as foreign processes),
    and the device starts fresh (device_file.fresh_device)."""
    held = claim(Path(device_file.claim_path(name)), f"simulated device {name!r}", info)
    try:
        device_file.fresh_device(name, tenant_user.gid if tenant_user is not None else None)
    except OSError as exc:
        held.release()
        raise StartupError(f"cannot make the simulated device {name!r}: {exc}") from None
    return held


# A start (or a recovery) right after a runtime died meets its watchdog (or
# --recover, under systemd both may run) still recovering the run folder under
# its claim: that takes well under a second.
RECOVERY_WAIT_S = 10.0
RECOVERING = (f"{WATCHDOG} pid", "krex-runtime --recover pid")


def _claim_run_dir(run_dir: Path, info: str) -> Claim:
    deadline = time.monotonic() + RECOVERY_WAIT_S
    while True:
        try:
            return claim(run_dir / "runtime.lock", f"run dir {run_dir}", info)
        except ClaimError as exc:
            if not any(who in str(exc) for who in RECOVERING) or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _prepare_claimed(
    config: Config,
    gpus: list[Gpu],
    run_dir: Path,
    tenant_user: access.TenantUser | None,
    run_as: access.RunAs,
    curve_keys: curve.ServerKeys | None,
    claims: list[Claim],
    server_as: access.RunAs | None,
) -> Host:
    for name in endpoints.SOCKETS:
        (run_dir / name).unlink(missing_ok=True)
    output_dir = Path(config.tenants.output_dir) if config.tenants.output_dir else run_dir / "output"
    output_dir.mkdir(parents=True, exist_ok=True)
    library = native_build.interception_library()
    if config.tenants.preload and not library.exists():
        raise StartupError(
            f"the interception library {library} is not built: run `make -C native` "
            "(or set tenants.preload = false to run tenants unprotected)"
        )
    if tenant_user is not None:
        try:
            access.check_tenant_can_read(tenant_user, _tenant_files(config, gpus, library))
        except access.AccessError as exc:
            raise StartupError(str(exc)) from None
        if config.telemetry.canary or config.pool.size_per_gpu > 0 or config.pool.zygote:
            _check_tenant_runs_python(tenant_user, {**os.environ, **config.tenants.env, **access.tenants_env(tenant_user)})
    if server_as is not None and config.forward.servers_per_gpu > 0:
        try:
            access.check_server_can_read(server_as, _server_files(gpus))
        except access.AccessError as exc:
            raise StartupError(str(exc)) from None
    if tenant_user is not None and tenant_user.uids is not None:
        check_enough_uids(config, len(gpus), tenant_user.uids[1])
    cgroup_slice = _open_cgroups(config, run_dir)
    try:
        recovered = machinery.recover(run_dir, cgroup_slice)
        recovered += forward_ring.remove_left(run_dir)  # an earlier run's: none of its commands runs now
        for line in recovered:
            log.warning("recovery: %s", line)
        if cgroup_slice is not None:
            for leftover in cgroup_slice.leftovers():
                log.warning("ending a command cgroup left by a previous run: %s", leftover)
                cgroups.kill_and_remove(leftover)
    except BaseException:
        if cgroup_slice is not None:
            cgroup_slice.remove()
        raise
    identities = None
    if tenant_user is not None and tenant_user.uids is not None:
        identities = Identities(*tenant_user.uids, tenant_user.gid, run_dir)
    return Host(run_dir, output_dir, library, tenant_user, run_as, curve_keys, cgroup_slice, recovered, claims,
                identities, config.gpus.simulated_device if gpus and gpus[0].simulated else None, server_as)


def check_enough_uids(config: Config, gpus: int, count: int) -> None:
    """Every tenant that can run at once needs a uid of its own."""
    most = gpus * (config.effective_slots_per_gpu + config.pool.size_per_gpu + (1 if config.telemetry.canary else 0))
    if count < most:
        raise StartupError(
            f"tenants.uid_range has {count} uids, fewer than the {most} tenants this node can run at once "
            "(per GPU: dispatcher.slots_per_gpu, pool.size_per_gpu and a canary)"
        )


def check_before_claims(config: Config, gpus: list[Gpu] | None) -> None:
    """What a start refuses of `config` before it claims anything of the node,
    for `--check-config`: the accounts it names for tenants (tenants.user,
    tenants.uid_range over existing accounts, tenants.group) and, where the
    GPUs are known (`gpus`: the simulated ones; real GPUs are found at start),
    whether the range has a uid for every tenant that can run at once; the
    CURVE keys of a tcp endpoint. Not whether tenants would run as root where
    the config names no account: that depends on who starts it and on --sim.
    StartupError with the start's own words."""
    try:
        tenant_user = access.tenant_user(config) if config.tenants.user or config.tenants.uid_range else None
        curve.server_keys(config.runtime)
    except (access.AccessError, curve.CurveError) as exc:
        raise StartupError(str(exc)) from None
    if gpus is not None and tenant_user is not None and tenant_user.uids is not None:
        check_enough_uids(config, len(gpus), tenant_user.uids[1])


def recover_left_state(config: Config) -> list[str]:
    """`krex-runtime --recover`, a unit's ExecStopPost=: `recover_run_dir` of
    the config's run folder."""
    return recover_run_dir(resolve_run_dir(config), "krex-runtime --recover")


def recover_run_dir(run_dir: Path, who: str) -> list[str]:
    """Without starting a runtime, undo what one that is no longer running
    left in `run_dir`: first thaw its frozen command cgroups and reopen its
    closed gates (the tenants parked there go on), then end the commands it
    left (nothing will report them: their submitters lost them with it) and
    remove its cgroup slice, gates and sockets. Returns what was done, one line
    each. `krex-runtime --recover` and the watchdog (service/watchdog.py) both
    run it; a start runs its first half (machinery.recover). The run folder's
    claim keeps it off a runtime that still serves. Run it in the runtime's
    cgroup (as systemd runs ExecStopPost=, and where the watchdog lives), where
    its slice is."""
    if not (run_dir / "runtime.lock").exists():
        return []
    try:
        held = _claim_run_dir(run_dir, f"{who} pid {os.getpid()}")
    except ClaimError as exc:
        raise StartupError(f"{exc}: a runtime still serves it, nothing to recover") from None
    try:
        # The slice a runtime left, whichever hierarchy it used; none is made here.
        left = [v for v in (2, 1) if (path := cgroups.slice_path(run_dir, v)) is not None and path.is_dir()]
        cgroup_slice = CgroupSlice.open(run_dir, left[0]) if left else None
        done = machinery.recover(run_dir, cgroup_slice)
        if cgroup_slice is not None:
            for leftover in cgroup_slice.leftovers():
                populated = cgroups.populated(leftover)
                if not cgroups.kill_and_remove(leftover):
                    done.append(f"cannot end {leftover.name}: still populated")
                else:
                    done.append(f"ended {leftover.name}" if populated else f"removed empty {leftover.name}")
            if not cgroup_slice.leftovers():
                _remove_dir(cgroup_slice.path, done)
        for socket_path in sorted(p for p in run_dir.iterdir() if p.is_socket()):  # control, telemetry, region
            socket_path.unlink(missing_ok=True)
            done.append(f"removed {socket_path.name}")
        done += tenant_reports.remove_left(run_dir)  # their commands ended above
        done += forward_ring.remove_left(run_dir)
        return done
    finally:
        held.release()


def _remove_dir(cgroup: Path, done: list[str]) -> None:
    try:
        cgroup.rmdir()
        done.append(f"removed empty {cgroup.name}")
    except OSError:
        pass  # populated meanwhile: the next start ends it


def _open_cgroups(config: Config, run_dir: Path) -> CgroupSlice | None:
    """cgroup v2 where writable, else the v1 freezer hierarchy (auto), or as configured."""
    choice = config.tenants.cgroups
    versions = {"auto": (2, 1), "v2": (2,), "v1": (1,), "off": ()}[choice]
    for version in versions:
        found = CgroupSlice.open(run_dir, version)
        if found is not None:
            return found
    if choice in ("v2", "v1"):
        log.warning("tenants.cgroups = %s: that hierarchy is not writable here; using process groups", choice)
    return None


# What a canary or a context process imports first, as the tenants' user runs it.
PYTHON_PROBE = "import krex_runtime.tenant.canary"


def _check_tenant_runs_python(user: access.TenantUser, env: dict[str, str]) -> None:
    """Run the runtime's Python once as the tenants' user, as the canary and
    the context pool will: a user that cannot (no access to the interpreter,
    its libraries or the package) is refused now, in one line, instead of its
    canary failing every few seconds for as long as the runtime runs. In the
    environment tenants get (the runtime's, `tenants.env`, the user's names)."""

    def become() -> None:
        os.setgroups([])
        os.setgid(user.gid)
        os.setuid(user.uid)

    argv = [sys.executable, "-c", PYTHON_PROBE]
    try:
        done = subprocess.run(argv, preexec_fn=become, cwd="/", env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        problem = str(exc)
    else:
        if done.returncode == 0:
            return
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        problem = lines[-1] if lines else f"exit status {done.returncode}"
    raise StartupError(f"tenants.user {user.name!r} cannot run the runtime's Python {sys.executable}: {problem[:300]}")


def _server_files(gpus: list[Gpu]) -> list[Path]:
    """What a context server running as forward.server_user must be able to read."""
    files = [native_build.context_server()]
    if gpus and gpus[0].simulated:
        files.append(native_build.simulated_driver_dir())
    return files


def _tenant_files(config: Config, gpus: list[Gpu], library: Path) -> list[Path]:
    """What a tenant running as another user must be able to read."""
    files = [library] if config.tenants.preload else []
    if config.tenants.preload and any(g.vendor == "amd" for g in gpus):
        files.append(native_build.hip_library(library))
    if gpus and gpus[0].simulated:
        files.append(native_build.simulated_driver_dir())
    if config.pool.size_per_gpu > 0 or config.pool.zygote:
        files += [Path(sys.executable), Path(krex_runtime.__file__).parent]
    return files
