"""Who may reach the runtime's files and sockets, and as whom its tenants run.

The runtime runs with umask 027, so nothing it creates is open to other users
by accident; access is then granted file by file:

    control.sock           owner, and runtime.access_group (0660), else owner only (0600)
    control-ro.sock,       as control.sock; or runtime.read_only_group (0660),
    telemetry.sock         or every local user when that is "*" (0666)
    region.sock, gates/    the tenants' user, when tenants run as another user
    the run dir            owner rwx; its group (access_group, else read_only_group)
                           r-x and setgid, so the trace and outputs are theirs
                           to read; others --x only when someone outside that
                           group must reach a socket in it (never a listing)

Commands and context processes run as `tenants.user` (its primary group, no
supplementary groups) with the umask the runtime was started with. Forwarded
mode's context servers serve one tenant after another, so they run as no uid
a tenant can be given: the runtime's own user, or `forward.server_user`
(`server_run_as`). A runtime
started as root refuses to run them as root unless `tenants.allow_root`.
With `tenants.uid_range` each runs as a uid of its own from the range instead
(host/identities.py), its group of the same number, and the tenants'
group (`tenants.group`, else the user's) as its only supplementary group:
what all tenants reach (the region socket, the gates, the tenant-reports
folder) is group-owned by that group, what is one tenant's by its uid.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from krex_runtime.node.config import Config

RUNTIME_UMASK = 0o027
EVERYONE = "*"


class AccessError(Exception):
    """A setting of access that cannot work; the message is one line for the operator."""


@dataclass(frozen=True)
class TenantUser:
    """The account tenants run as when it is not the runtime's own."""

    name: str
    uid: int  # with a uid range: its first uid, which start-up checks run as
    gid: int  # the tenants' group
    home: str
    uids: tuple[int, int] | None = None  # tenants.uid_range: (first, count)

    def owns(self, uid: int) -> bool:
        """A uid tenants run as."""
        if self.uids is not None:
            return self.uids[0] <= uid < self.uids[0] + self.uids[1]
        return uid == self.uid


@dataclass(frozen=True)
class RunAs:
    """What a process the runtime starts (a tenant, a context server) takes on between fork and exec."""

    user: TenantUser | None  # None: the runtime's own user
    umask: int
    groups: tuple[int, ...] = ()  # supplementary groups (a uid of the range: the tenants' group)


@dataclass(frozen=True)
class FileAccess:
    mode: int
    gid: int  # -1: leave the group as it is


def group_id(name: str, key: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise AccessError(f"{key} names an unknown group {name!r}") from None


def tenant_user(config: Config) -> TenantUser | None:
    """The account tenants run as (None: the runtime's own), after the checks
    that keep tenants away from root and from the control socket."""
    settings = config.tenants
    euid = os.geteuid()
    if settings.uid_range:
        return _range_user(config, euid)
    entry = _named_user(settings.user)
    uid = entry.pw_uid if entry is not None else euid
    if uid == 0 and not settings.allow_root:
        file = config.source if config.source != Config().source else "/etc/krex/krex.toml"
        raise AccessError(
            f"tenants would run as root: in {file}, under [tenants], set user = \"krex-tenant\" "
            f"(an unprivileged account) or allow_root = true, then start krex-runtime --config {file}"
        )
    if uid == euid:
        return None
    if euid != 0:
        raise AccessError(f"tenants.user = {settings.user!r} needs a runtime started as root (this one runs as uid {euid})")
    assert entry is not None  # a uid other than the runtime's comes from a named user
    user = TenantUser(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
    _check_not_operator(config, user)
    return user


def _named_user(name: str) -> pwd.struct_passwd | None:
    """The account `tenants.user` names (None: it names none)."""
    if not name:
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise AccessError(f"tenants.user names an unknown user {name!r}") from None


def _check_not_operator(config: Config, user: TenantUser) -> None:
    operators = config.runtime.access_group
    if operators:
        gid = group_id(operators, "runtime.access_group")
        if user.gid == gid or (user.uids is None and user.name in grp.getgrgid(gid).gr_mem):
            raise AccessError(
                f"tenants.user {user.name!r} is a member of runtime.access_group {operators!r}: "
                "its commands could reach the control socket"
            )


def _range_user(config: Config, euid: int) -> TenantUser:
    """The tenants of `tenants.uid_range`, as one TenantUser: the range's uids,
    the tenants' group; start-up checks run as the first uid."""
    settings = config.tenants
    first, count = settings.uid_range
    if euid != 0:
        raise AccessError(f"tenants.uid_range needs a runtime started as root (this one runs as uid {euid})")
    entry = _named_user(settings.user)
    if settings.group:
        gid = int(settings.group) if settings.group.isdigit() else group_id(settings.group, "tenants.group")
    else:
        assert entry is not None  # config validation: uid_range needs a group or a user
        gid = entry.pw_gid
    last = first + count - 1
    accounts = {e.pw_uid: e.pw_name for e in pwd.getpwall() if first <= e.pw_uid <= last}
    if first <= 0 or euid in range(first, last + 1) or accounts:
        who = f"the account {sorted(accounts.items())[0][1]!r}" if accounts else "root or the runtime's uid"
        raise AccessError(f"tenants.uid_range {first}..{last} holds {who}: its uids must be unused")
    if entry is not None and first <= entry.pw_uid <= last:
        raise AccessError(f"tenants.uid_range {first}..{last} holds tenants.user {settings.user!r}")
    if gid == 0 or first <= gid <= last:
        raise AccessError(f"tenants.group {gid} must be neither root's group nor a tenant's own (the range's)")
    name = settings.user or f"uids {first}-{last}"
    user = TenantUser(name, first, gid, entry.pw_dir if entry is not None else "/", uids=(first, count))
    _check_not_operator(config, user)
    return user


def check_tenant_can_read(user: TenantUser, paths: list[Path]) -> None:
    """Tenants run files of the runtime's installation (the interception
    library, the simulated driver, the runtime's Python for context
    processes); one it cannot read would leave it unprotected or unstartable."""
    unreadable = _unreadable(RunAs(user, 0), paths)
    if unreadable:
        raise AccessError(f"tenants.user {user.name!r} cannot read {unreadable}: install KREX where that user can read it")


def _unreadable(run_as: RunAs, paths: list[Path]) -> str:
    """The first of `paths` that `run_as` cannot read ("" when it reads them all)."""
    if not paths or run_as.user is None:
        return ""
    probe = 'for p; do test -r "$p" || echo "$p"; done'
    done = subprocess.run(
        ["/bin/sh", "-c", probe, "sh", *map(str, paths)],
        user=run_as.user.uid, group=run_as.user.gid, extra_groups=list(run_as.groups), capture_output=True,
        text=True, timeout=30,
    )
    unreadable = done.stdout.split()
    if done.returncode != 0 or unreadable:
        return unreadable[0] if unreadable else done.stderr.strip()
    return ""


def server_run_as(config: Config, tenants: TenantUser | None, umask: int) -> RunAs | None:
    """Who forwarded mode's context servers run as (None: the runtime's own
    user). A server executes the calls of one tenant after another and holds
    what they leave until it has cleaned up, so it may run as no uid a tenant
    can be given: not a uid of `tenants.uid_range`, not `tenants.user`; nor as
    an operator. `forward.server_user` is an account or a bare uid (no account
    needed; the runtime's own uid is the default); its group is the account's,
    else the tenants' group, and the tenants' group is its only other one (it
    reaches the GPU devices and the simulated device as tenants do)."""
    value = config.forward.server_user
    if not value:
        return None
    key = "forward.server_user"
    entry = None
    if value.isdigit():
        uid = int(value)
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            pass
    else:
        try:
            entry = pwd.getpwnam(value)
        except KeyError:
            raise AccessError(f"{key} names an unknown user {value!r}") from None
        uid = entry.pw_uid
    euid = os.geteuid()
    if uid == euid:
        return None
    if euid != 0:
        raise AccessError(f"{key} = {value!r} needs a runtime started as root (this one runs as uid {euid})")
    if tenants is not None and tenants.uids is not None and tenants.owns(uid):
        raise AccessError(f"{key} {value} is a uid of tenants.uid_range: a tenant could be given it")
    tenant_account = config.tenants.user
    if (tenants is not None and tenants.uids is None and tenants.uid == uid) or (
            tenant_account and entry is not None and entry.pw_name == tenant_account):
        raise AccessError(f"{key} {value!r} is tenants.user: every tenant runs as it")
    gid = entry.pw_gid if entry is not None else (tenants.gid if tenants is not None else uid)
    name = entry.pw_name if entry is not None else f"uid {uid}"
    user = TenantUser(name, uid, gid, entry.pw_dir if entry is not None else "/")
    operators = config.runtime.access_group
    if operators:
        op_gid = group_id(operators, "runtime.access_group")
        if gid == op_gid or name in grp.getgrgid(op_gid).gr_mem:
            raise AccessError(f"{key} {value!r} is a member of runtime.access_group {operators!r}: "
                              "a context server could reach the control socket")
    groups = (tenants.gid,) if tenants is not None and tenants.gid != gid else ()
    return RunAs(user, umask, groups)


def check_server_can_read(run_as: RunAs, paths: list[Path]) -> None:
    """The context server's program and the driver it loads."""
    unreadable = _unreadable(run_as, paths)
    if unreadable:
        assert run_as.user is not None
        raise AccessError(f"forward.server_user {run_as.user.name!r} cannot read {unreadable}: "
                          "install KREX where that user can read it")


def tenants_env(user: TenantUser | None) -> dict[str, str]:
    """The variables that name the account a tenant runs as (with a uid range,
    each tenant's own are set per tenant: commands/environment.py)."""
    if user is None or user.uids is not None:
        return {}
    return {"HOME": user.home, "USER": user.name, "LOGNAME": user.name}


# --- the run dir and its sockets ---------------------------------------------------


def control_access(config: Config) -> FileAccess:
    group = config.runtime.access_group
    return FileAccess(0o660, group_id(group, "runtime.access_group")) if group else FileAccess(0o600, -1)


def read_only_access(config: Config) -> FileAccess:
    """The read-only control socket and the telemetry socket."""
    group = config.runtime.read_only_group
    if group == EVERYONE:
        return FileAccess(0o666, -1)
    if group:
        return FileAccess(0o660, group_id(group, "runtime.read_only_group"))
    return control_access(config)


def run_dir_access(config: Config, tenants_apart: bool) -> FileAccess:
    access, read_only = config.runtime.access_group, config.runtime.read_only_group
    groups = {g for g in (access, read_only) if g and g != EVERYONE}
    dir_group = access or (read_only if read_only != EVERYONE else "")
    others_pass = tenants_apart or read_only == EVERYONE or len(groups) > 1
    mode = 0o700 | (stat.S_ISGID | 0o050 if dir_group else 0) | (0o001 if others_pass else 0)
    return FileAccess(mode, group_id(dir_group, "runtime.access_group") if dir_group else -1)


def prepare_run_dir(run_dir: Path, access: FileAccess) -> None:
    """Create the run dir, or take over the one there, as the runtime's own;
    whatever a previous run left in it is closed to other users."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        info = os.lstat(run_dir)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise AccessError(f"run dir {run_dir} is not a directory (a symlink is refused)")
        if info.st_uid != os.geteuid():
            raise AccessError(f"run dir {run_dir} belongs to uid {info.st_uid}, not to the runtime's user (uid {os.geteuid()})")
        apply(run_dir, access)
        for entry in run_dir.iterdir():
            entry_info = os.lstat(entry)
            if not stat.S_ISLNK(entry_info.st_mode) and entry_info.st_mode & 0o007:
                os.chmod(entry, stat.S_IMODE(entry_info.st_mode) & ~0o007)
    except OSError as exc:
        raise AccessError(f"cannot prepare run dir {run_dir}: {exc.strerror}") from None


def apply(path: Path, access: FileAccess) -> None:
    """Group first, then mode: a file never has the new mode with the old group."""
    if access.gid != -1:
        os.chown(path, -1, access.gid)
    os.chmod(path, access.mode)


def open_to_tenants(path: Path, user: TenantUser | None, mode: int) -> None:
    """Something tenants open themselves (the region socket, the gates):
    `mode` for the owner and the tenants' group when tenants run as another
    user, else the owner's bits of it alone."""
    apply(path, FileAccess(mode, user.gid) if user is not None else FileAccess(mode & 0o700, -1))
