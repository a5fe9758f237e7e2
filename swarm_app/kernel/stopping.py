"""Stop signals, the one platform-specific piece of the run commands.

SIGINT (Ctrl-C) and SIGTERM (systemd, `kill`, a closing terminal) both ask the session to stop: it
checkpoints and exits 0. POSIX loops take `add_signal_handler`; on Windows, where asyncio has none,
`signal.signal` does the same for SIGINT, SIGTERM and SIGBREAK (Ctrl-Break) where they exist. A
second signal while stopping is ignored: the checkpoint being written must not be cut off.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Callable

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGBREAK") if hasattr(signal, name))


def on_stop_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> Callable[[], None]:
    """Call `stop()` on the loop when a stop signal arrives; returns the function that undoes it."""
    try:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop)
        return lambda: [loop.remove_signal_handler(sig) for sig in STOP_SIGNALS]
    except (NotImplementedError, RuntimeError):  # Windows event loops, or not the main thread
        previous = {sig: signal.signal(sig, lambda *_: loop.call_soon_threadsafe(stop)) for sig in STOP_SIGNALS}
        return lambda: [signal.signal(sig, handler) for sig, handler in previous.items()]
