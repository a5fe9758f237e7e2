"""Atomic file writes: write to a temp file in the same folder, fsync, rename over the target.

A crash at any moment leaves either the old file or the new one, never half of one. Writes the
training loop cannot lose go through `retry_on_descriptor_shortage`, so a flood of connections that
uses up the descriptor limit delays them instead of ending the run.
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def fsync_dir(folder: Path) -> None:
    """Make a rename durable. Directories cannot be opened for fsync on Windows: skipped there."""
    if os.name == "nt":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


DESCRIPTOR_ERRNOS = {errno.EMFILE, errno.ENFILE}
"""Too many open files (this process / the whole system): a passing shortage, not a broken disk."""
RETRY_DELAYS_S = (0.1, 0.5, 1, 2, 5, 10, 10, 30, 30, 60, 60, 60, 60)
"""About 5 minutes in all: long enough for a flood of connections to be shed (peer/io/server.py caps
them and times idle ones out in seconds), short enough that a stuck process still says so."""


def retry_on_descriptor_shortage(write: Callable[[], T], what: str, sleep: Callable[[float], None] = time.sleep) -> T:
    """Run `write`; while it fails only because no file descriptor is free, wait and try again.

    Any other OSError (disk full, permissions) is raised at once: waiting would not help.
    """
    for delay in RETRY_DELAYS_S:
        try:
            return write()
        except OSError as exc:
            if exc.errno not in DESCRIPTOR_ERRNOS:
                raise
            log.warning("%s failed: no file descriptor free (%s); retrying in %s s", what, exc.strerror, delay)
            sleep(delay)
    return write()


def check_writable_folder(folder: Path, flag: str) -> None:
    """Raise UsageError unless `folder` is (or can be created as) a folder this process can write in.

    Probes with a temp file (removed at once) in the folder or its nearest existing parent: mode bits
    say nothing for root, read-only mounts or Windows ACLs, a real write does.
    """
    from swarm_app.kernel.errors import UsageError

    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        what = "is a file" if probe == folder else f"is inside {probe}, which is a file"
        raise UsageError(f"{flag} {folder} {what}; pass a folder")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".swarm-write-test-", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise UsageError(f"{flag} {folder}: cannot write in {probe} ({exc.strerror or exc}); "
                         "fix its permissions or choose another folder") from None
