"""A peer node under a lowered soft descriptor limit, for test_connections (run as a subprocess).

`python -m tests.peer.fd_node LIMIT FOLDER`: lowers RLIMIT_NOFILE to LIMIT, starts a node on
127.0.0.1:0 and a thread that appends to FOLDER/metrics.jsonl every 10 ms (opening the file each
time, as the training loop does), prints {"address": ...}, and on a line on stdin (or its end) prints
a JSON report: writes done, writes failed, the most descriptors seen open, the gate's counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

from swarm_app.peer.core.config import local_config
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.io.node import PeerNode


class Writer(threading.Thread):
    """Stands in for training: a file opened, written and closed 100 times a second."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.writes, self.errors, self.peak_fds = path, 0, [], 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.01):
            self.peak_fds = max(self.peak_fds, len(os.listdir("/proc/self/fd")))
            try:
                with open(self.path, "a", encoding="utf-8") as out:
                    out.write(json.dumps({"n": self.writes, "t": time.time()}) + "\n")
                self.writes += 1
            except OSError as exc:
                self.errors.append(f"{exc.__class__.__name__}: {exc}")


async def main(folder: Path) -> None:
    # default caps; the header timeout long enough that no idle client is dropped while the test still opens the
    # 1,000 (at 2 s, on a loaded machine, early ones timed out and freed slots: fewer were refused at the gate)
    config = dataclasses.replace(local_config(), header_timeout_s=60.0)
    node = PeerNode(config, Identity.generate())
    await node.start()
    writer = Writer(folder / "metrics.jsonl")
    writer.start()
    print(json.dumps({"address": node.address, "gate_total": node.gate.total, "gate_per_ip": node.gate.per_ip}),
          flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    writer.stopped.set()
    writer.join()
    report = {"writes": writer.writes, "errors": writer.errors[:5], "peak_fds": writer.peak_fds,
              "refused": dict(node.gate.refused), "open": node.gate.open, "peak_open": node.gate.peak,
              "accepted": node.stats().accepted,
              "limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}
    await node.stop()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    limit, folder = int(sys.argv[1]), Path(sys.argv[2])
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    asyncio.run(main(folder))
