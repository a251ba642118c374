"""The logs of context processes and zygotes: `<run_dir>/pool/<id>.log`.

Each process the runtime starts to serve commands writes its stdout and
stderr there (a traceback of a failed start-up, a command's stray output
before its pipes were set). A node replaces context processes all day
(every `pool.max_commands` commands, after every crash, timeout or
state change), so the folder is pruned: the logs of live processes stay,
and of the others only the most recent `KEEP_ENDED` per kind. Pruned when
the pool or the zygotes start (the last run's logs) and after each process
ends.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("krex.pool")

KEEP_ENDED = 32


def prune(log_dir: Path, prefix: str, live: set[str], keep: int = KEEP_ENDED) -> None:
    """Remove `prefix*.log` files of processes not in `live`, all but the `keep` newest."""
    ended = []
    try:
        for path in log_dir.glob(f"{prefix}*.log"):
            if path.stem in live:
                continue
            try:
                ended.append((path.stat().st_mtime, path))
            except OSError:
                continue
    except OSError as exc:
        log.warning("cannot list %s: %s", log_dir, exc)
        return
    ended.sort(reverse=True)
    for _mtime, path in ended[keep:]:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove %s: %s", path, exc.strerror)
