"""One node per run folder: an OS file lock on `<run folder>/node.lock`, held while a node uses it.

The operating system drops the lock when the process ends, however it ends (`kill -9`, a crash, a power
cut), so a stale lock never needs cleaning up, and nothing here guesses from pids whether a holder
lives. The file also holds the holder's pid, for the message a second node gets. Both branches sit
side by side in `_try_lock`: flock(2) on the whole file on POSIX; on Windows msvcrt.locking on one
byte far past the pid (a locked byte cannot be read by others there, the pid must stay readable).
Must not: wait for a lock, or delete the lock file (a third process could then lock a new file while
the holder still runs in the folder).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Callable

from swarm_app.kernel.errors import RunFolderBusy, UsageError

LOCK_FILE = "node.lock"
WINDOWS_LOCKED_BYTE = 1 << 20
"""The byte Windows locks: past any pid written at the start of the file (Windows allows locking past EOF)."""


class RunLock:
    """The lock on one run folder; `release()` (or the end of the process) gives it up."""

    def __init__(self, path: Path, handle: IO[bytes]) -> None:
        self.path = path
        self._handle: IO[bytes] | None = handle

    @classmethod
    def acquire(cls, folder: Path, try_lock: Callable[[IO[bytes]], bool] | None = None) -> RunLock:
        """Lock `folder` (created if missing) for this process, or raise RunFolderBusy naming the holder.
        `try_lock`: this system's (the default); tests pass the Windows branch over another byte lock."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_FILE
        handle = open(path, "a+b")  # binary: Windows seeks past the end; never truncated before the lock is ours
        try:
            locked = (try_lock or _try_lock)(handle)
        except OSError as exc:  # a file system without locks (some network mounts)
            handle.close()
            raise UsageError(f"cannot lock {path} ({exc.strerror or exc}); choose a --run-dir on a local disk") from None
        if not locked:
            holder = _read_pid(handle)
            handle.close()
            who = f"pid {holder}" if holder else "another process"
            raise RunFolderBusy(f"the run folder {folder} is in use by a swarm node ({who}); look in on it with "
                                f"`swarm watch --run-dir {folder}`, stop it first, or choose another --run-dir",
                                title="Run folder in use")
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n".encode("ascii"))
        handle.flush()
        return cls(path, handle)

    def release(self) -> None:
        """Give the lock up (closing the file does, on both systems); calling it twice is harmless."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    @property
    def held(self) -> bool:
        return self._handle is not None


def _try_lock(handle: IO[bytes]) -> bool:
    """Take the lock without waiting: True when it is ours now."""
    if os.name == "nt":
        import msvcrt

        return lock_far_byte(handle, lambda fd: msvcrt.locking(fd, msvcrt.LK_NBLCK, 1))
    import fcntl

    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another open file holds it
        return False
    return True


def lock_far_byte(handle: IO[bytes], lock_one_byte: Callable[[int], None]) -> bool:
    """The Windows branch: `lock_one_byte(fd)` locks one byte at the file's position without waiting
    (msvcrt.locking), raising OSError when another holds it; the position is WINDOWS_LOCKED_BYTE while it
    runs and back at 0 after, so the pid is written at the start, unlocked and readable."""
    handle.seek(WINDOWS_LOCKED_BYTE)
    try:
        lock_one_byte(handle.fileno())
    except OSError:
        return False
    finally:
        handle.seek(0)
    return True


def _read_pid(handle: IO[bytes]) -> int | None:
    handle.seek(0)
    text = handle.read(32).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None
