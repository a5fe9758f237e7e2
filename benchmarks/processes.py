"""Child processes of the benchmarks that start real `swarm` nodes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable


def stop_all(procs: Iterable[subprocess.Popen], grace_s: float = 20.0) -> None:
    """SIGTERM every process first (they stop together: a node writes its checkpoint and says bye), then wait
    for each; one still running after `grace_s` is killed."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
