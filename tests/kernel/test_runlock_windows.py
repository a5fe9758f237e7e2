"""The run lock's Windows branch (`lock_far_byte`), run here over Linux open-file-description byte locks.

What it proves: the branch's own logic (it locks one byte at WINDOWS_LOCKED_BYTE, not at the pid; a held
byte means RunFolderBusy naming the holder's pid, read back from the start of the file; the position is
back at 0 so the pid lands there; release frees it). `msvcrt.locking` is replaced by an F_OFD_SETLK lock on
one byte at the descriptor's position, which, like msvcrt's, locks from the current position, fails at
once when another open file holds the byte, and is dropped when the file is closed. What it cannot prove:
Windows' mandatory locking (a locked byte cannot be read there; here locks are advisory), and msvcrt itself.
"""

from __future__ import annotations

import os
import struct
import sys

import pytest

from swarm_app.kernel.errors import RunFolderBusy
from swarm_app.kernel.runlock import LOCK_FILE, WINDOWS_LOCKED_BYTE, RunLock, lock_far_byte

fcntl = pytest.importorskip("fcntl")
pytestmark = pytest.mark.skipif(sys.platform != "linux" or not hasattr(fcntl, "F_OFD_SETLK"),
                                reason="needs open-file-description locks (Linux)")


def ofd_lock(fd: int, start: int, kind: int | None = None) -> None:
    """Lock one byte at `start` for this open file (not this process): OSError when another holds it."""
    flock = struct.pack("hhqqi4x", fcntl.F_WRLCK if kind is None else kind, os.SEEK_SET, start, 1, 0)
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, flock)


def msvcrt_like(fd: int) -> None:
    """msvcrt.locking(fd, LK_NBLCK, 1): one byte at the file position, without waiting."""
    ofd_lock(fd, os.lseek(fd, 0, os.SEEK_CUR))


def windows(handle) -> bool:
    return lock_far_byte(handle, msvcrt_like)


def byte_is_free(path, start: int) -> bool:
    with open(path, "rb") as other:
        try:
            ofd_lock(other.fileno(), start, fcntl.F_RDLCK)
        except OSError:
            return False
        return True


def test_the_windows_branch_locks_a_far_byte_and_a_second_node_is_told_the_holders_pid(tmp_path):
    first = RunLock.acquire(tmp_path, try_lock=windows)
    path = tmp_path / LOCK_FILE
    assert path.read_text() == f"{os.getpid()}\n"  # written at the start: the position went back to 0
    assert not byte_is_free(path, WINDOWS_LOCKED_BYTE) and byte_is_free(path, 0)  # the pid's bytes stay unlocked
    with pytest.raises(RunFolderBusy, match=f"pid {os.getpid()}"):
        RunLock.acquire(tmp_path, try_lock=windows)
    assert path.read_text() == f"{os.getpid()}\n"  # the refused node changed nothing
    first.release()
    again = RunLock.acquire(tmp_path, try_lock=windows)
    assert again.held and byte_is_free(path, 0) and not byte_is_free(path, WINDOWS_LOCKED_BYTE)
    again.release()
