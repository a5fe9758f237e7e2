"""Where log records go, set up by the entry points only (library code just logs).

stderr gets "warning: <message>" lines for people (module paths and tracebacks with --verbose); every
run also appends to `swarm.log` in the user log dir; while a TUI owns the terminal, the stderr
handlers rest (records reach its Logs tab through the session's events, and the file).
"""

from __future__ import annotations

import contextlib
import logging
import sys
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


def to_stderr(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(HumanFormatter(verbose))
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])


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
