"""Where log records go, set up by the entry points only (library code just logs).

stderr gets "warning: <message>" lines for people (module paths and tracebacks with --verbose, or
--log-level debug); every run also appends to `swarm.log` in the user log dir; while a TUI owns the
terminal, the stderr handlers rest (records reach its Logs tab through the session's events, and the
file). A traceback of what ended a command goes to `swarm.log` only (`traceback_to_file`): the terminal
gets the one line the CLI prints.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)


class HumanFormatter(logging.Formatter):
    """"warning: <message>" for people; the module path only with --verbose (for bug reports)."""

    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        where = f" [{record.name}]" if self.verbose else ""
        text = f"{record.levelname.lower()}{where}: {record.getMessage()}"
        if record.exc_info and self.verbose:
            text += "\n" + self.formatException(record.exc_info)
        return text


LEVELS = ("debug", "info", "warning", "error")
"""--log-level choices: the lowest level shown on stderr (default warning; -v means info)."""


def to_stderr(verbose: bool, level: str | None = None) -> None:
    """Records at `level` and up (info with --verbose, else warning) to stderr; module paths and
    tracebacks at info and below (a user who asks for detail gets it)."""
    number = getattr(logging, (level or ("info" if verbose else "warning")).upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(HumanFormatter(number <= logging.INFO))
    handler.setLevel(number)
    logging.basicConfig(level=number, handlers=[handler])


@contextlib.contextmanager
def terminal_owned_by_tui() -> Iterator[None]:
    """While the TUI owns the terminal, log records reach its Logs tab and the log file, not stderr."""
    root = logging.getLogger()
    on_terminal = [h for h in root.handlers if type(h) is logging.StreamHandler]
    for handler in on_terminal:
        root.removeHandler(handler)
    try:
        yield
    finally:
        for handler in on_terminal:
            root.addHandler(handler)


LOG_FILE_HANDLER = "swarm-log-file"


def to_file() -> None:
    """This run's log records (INFO and up) also go to a file in the user log dir, for bug reports."""
    from swarm_app.kernel.paths import user_dirs

    folder = user_dirs().log
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(folder / "swarm.log", encoding="utf-8")
    except OSError as exc:
        log.warning("not writing a log file in %s (%s)", folder, exc.strerror)
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    handler.set_name(LOG_FILE_HANDLER)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == LOG_FILE_HANDLER]:  # one per process
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # the stderr handler keeps its own WARNING threshold


def traceback_to_file(exc: BaseException) -> Path | None:
    """Write `exc` with its whole traceback (and the errors it replaced) to swarm.log and nowhere else;
    returns the file, or None where no log file can be written."""
    if _file_handler() is None:
        to_file()
    handler = _file_handler()
    if handler is None:
        return None
    record = logging.LogRecord("swarm_app", logging.ERROR, __file__, 0, "the command ended on %s: %s",
                               (type(exc).__name__, exc), (type(exc), exc, exc.__traceback__))
    handler.handle(record)
    return Path(handler.baseFilename)


def _file_handler() -> logging.FileHandler | None:
    return next((h for h in logging.getLogger().handlers if h.get_name() == LOG_FILE_HANDLER), None)
