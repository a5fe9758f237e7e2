"""The user-facing error hierarchy.

A `SwarmError` carries a one-line message that names the problem and the fix; the CLI prints it and
exits non-zero, the TUI shows it as a notification. Nothing here formats tracebacks.
"""


class SwarmError(Exception):
    """An error a user can act on. `title` is a short heading; `exit_code` is what the CLI returns."""

    exit_code = 1

    def __init__(self, message: str, title: str = "Error") -> None:
        super().__init__(message)
        self.message = message
        self.title = title


class UsageError(SwarmError):
    """Bad input from the command line, a config file or the environment (exit code 2)."""

    exit_code = 2


class ModelError(UsageError):
    """A model or adapter folder that cannot be used."""


class CheckpointError(SwarmError):
    """A checkpoint that exists but cannot be loaded. Never overwritten silently."""

    exit_code = 2


class RunFolderBusy(UsageError):
    """Another node holds the run folder's lock (kernel/runlock.py): one node per run folder."""
