"""`watch.json` in the run folder: where a running node's status endpoint listens and its token.

The node writes it (atomically, mode 0600 from the first byte, so no other local user can read the
token) once its run has begun, and removes it when it stops cleanly; `swarm watch` reads it. A file
left by a node that crashed is stale: the watcher finds nothing listening and says so. This module
only reads and writes the file; it opens no socket.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.files import fsync_dir

log = logging.getLogger(__name__)

WATCH_FILE = "watch.json"


@dataclass(frozen=True)
class WatchInfo:
    port: int
    token: str
    pid: int
    """The node's process, for people reading the file (the watcher trusts only the connection)."""

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/events"


def watch_file_of(run_dir: Path) -> Path:
    return run_dir / WATCH_FILE


def write_watch_file(run_dir: Path, info: WatchInfo) -> Path:
    """Write `run_dir/watch.json` atomically; the temp file is created 0600, so the token is never
    readable by others, not even for a moment. On Windows the same file is written and os.chmod only
    sets the read-only flag: the folder's ACLs (the user profile's, by default) are not changed."""
    path = watch_file_of(run_dir)
    tmp = path.with_name(f".{WATCH_FILE}.{secrets.token_hex(4)}.tmp")
    data = json.dumps({"port": info.port, "token": info.token, "pid": info.pid}).encode("utf-8")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)  # a umask cannot widen the mode, but an inherited ACL default could
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(run_dir)
    return path


def remove_watch_file(run_dir: Path, info: WatchInfo) -> None:
    """Remove the file if it is still this node's (a node started later in the folder keeps its own).
    It runs on the way out, often after the error that ended the run (a run folder that turned
    unwritable): a file that cannot be removed is logged, never raised over that error. Left behind,
    it is stale and harmless: a watcher finds nothing listening and says so."""
    try:
        if read_watch_file(run_dir).token == info.token:
            watch_file_of(run_dir).unlink(missing_ok=True)
    except UsageError:
        return  # gone already, or not ours to remove
    except OSError as exc:
        log.info("could not remove %s (%s); it is stale now and harmless", watch_file_of(run_dir),
                 exc.strerror or exc, exc_info=True)


def read_watch_file(run_dir: Path) -> WatchInfo:
    path = watch_file_of(run_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"no node is running in {run_dir}; start one with swarm run "
                         "(or pass the node's --run-dir)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} is unreadable ({getattr(exc, 'strerror', None) or exc}); "
                         "watch as the user who runs the node") from None
    try:
        return WatchInfo(int(data["port"]), str(data["token"]), int(data.get("pid", 0)))
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{path} is not a watch file of this version; restart the node with swarm run") from None
