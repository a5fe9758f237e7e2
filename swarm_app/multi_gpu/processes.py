"""`swarm run --gpus all|0,1,...`: one node per GPU from one command.

Each GPU's node is its own `swarm run --no-ui --log-format json` process (CUDA_VISIBLE_DEVICES set to
its GPU, so a crash or an out-of-memory on one card leaves the others training), with its own key
(peer.identity "gpu-N"), run folder (`<run>-gpuN`), listen port (the base port + N, 0 stays 0) and
status endpoint (so `swarm watch --run-dir <run>-gpuN` shows one node in the TUI). Nodes 1.. dial
node 0 on this machine. This process only starts them, hands their events to the caller (`swarm run`
prints them as headless lines with a "gpu N" prefix), and passes SIGINT/SIGTERM on; it exits 0 when
every node stopped cleanly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.events import Event, event_from_dict
from swarm_app.kernel.paths import swarm_command

log = logging.getLogger(__name__)


def parse_gpus(text: str, found: int) -> list[int]:
    """GPU indexes from "all" or "0,1,..." for a machine with `found` GPUs. Raises UsageError."""
    if found == 0:
        raise UsageError("--gpus: no NVIDIA GPU found (nvidia-smi lists none); run without --gpus, or see swarm doctor")
    if text.strip() == "all":
        return list(range(found))
    try:
        wanted = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--gpus {text!r}: write all, or GPU numbers like 0,1") from None
    missing = [g for g in wanted if not 0 <= g < found]
    if missing or not wanted or len(set(wanted)) != len(wanted):
        raise UsageError(f"--gpus {text!r}: this machine has {found} GPU(s), numbered 0 to {found - 1}; "
                         f"use --gpus all or numbers from that range, each once")
    return wanted


@dataclass(frozen=True)
class GpuNode:
    gpu: int
    run_dir: Path
    listen: str
    argv: list[str]
    env: dict[str, str]


def plan_nodes(gpus: list[int], argv: list[str], run_dir: Path, listen: str, online: bool) -> list[GpuNode]:
    """The command of each GPU's node: the user's own flags, then what makes each node distinct."""
    host, _, port = listen.rpartition(":")
    nodes = []
    for n, gpu in enumerate(gpus):
        node_port = int(port) + n if int(port) else 0
        own = ["--no-ui", "--log-format", "json", "--run-dir", str(run_dir.with_name(f"{run_dir.name}-gpu{gpu}"))]
        if online:
            own += ["--listen", f"{host}:{node_port}"]
            if n and int(port):
                own += ["--peer", f"127.0.0.1:{port}"]  # the others find node 0 on this machine
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), "SWARM_PEER_IDENTITY": f"gpu-{gpu}"}
        nodes.append(GpuNode(gpu, Path(own[4]), f"{host}:{node_port}", [*swarm_command(), "run", *argv, *own],
                              env))
    return nodes


def without_gpus_flag(argv: list[str]) -> list[str]:
    """The `run` flags as the user typed them, minus --gpus (and its value)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--gpus":
            skip = True
        elif not arg.startswith("--gpus="):
            out.append(arg)
    return out


async def run_nodes(nodes: list[GpuNode], on_event: Callable[[int, Event], None]) -> int:
    """Start every node, hand their events to `on_event(gpu, event)`, pass stop signals on. 0 when every
    node stopped cleanly."""
    from swarm_app.kernel.stopping import on_stop_signals

    procs = [await asyncio.create_subprocess_exec(*n.argv, env=n.env, stdout=asyncio.subprocess.PIPE)
             for n in nodes]
    undo = on_stop_signals(asyncio.get_running_loop(), lambda: [_terminate(p) for p in procs])
    try:
        codes = await asyncio.gather(*(_relay(n, p, on_event) for n, p in zip(nodes, procs)))
    finally:
        undo()
    failed = [f"gpu {n.gpu} (exit {code})" for n, code in zip(nodes, codes) if code != 0]
    if failed:
        log.warning("node(s) that did not stop cleanly: %s; their run folders keep the last checkpoint",
                    ", ".join(failed))
    return 1 if failed else 0


async def _relay(node: GpuNode, proc: asyncio.subprocess.Process, on_event: Callable[[int, Event], None]) -> int:
    async for line in proc.stdout:
        text = line.decode("utf-8", errors="replace").strip()
        try:
            event = event_from_dict(json.loads(text))
        except ValueError:  # json.JSONDecodeError is a ValueError too
            log.debug("gpu %d: not an event: %s", node.gpu, text[:200])
            continue
        on_event(node.gpu, event)
    return await proc.wait()


def _terminate(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()  # SIGTERM: the node checkpoints and exits 0
