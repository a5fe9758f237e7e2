"""`swarm demo --nodes N`: a local swarm of N training nodes in one process, on 127.0.0.1.

Each node is a full Session (own run folder, seed, throwaway identity) whose exchange is a peer node
of `swarm_app.peer.io.local_nodes.local_swarm`; they find each other through the first node and peer
exchange. It prints nothing: the caller subscribes a view to each session (`on_session`), and
`format_summary` is the final table per node. Node 0 first scores the untouched model on the held-out
items (the baseline row of the summary); every node that finishes scores itself on the same items. The
summaries fill in as the nodes go, in a list the caller may hold, so a demo quit half way still has
its rows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.events import Event, RoundFinished
from swarm_app.kernel.paths import user_dirs
from swarm_app.kernel.settings import Settings
from swarm_app.kernel.stopping import on_stop_signals
from swarm_app.session.session import Session, SessionOptions


@dataclass
class NodeSummary:
    node: int
    engine: str = ""
    rounds: int = 0
    local_reward: float = 0.0
    total_reward: float = 0.0
    heldout_acc: float | None = None
    sent: int = 0
    received: int = 0
    used: int = 0
    error: str = ""
    """Why the node stopped early ("" when it ran to the end)."""
    baseline_acc: float | None = None
    """Node 0 only: the untouched model's held-out accuracy on the same items."""
    heldout_n: int = 0


def node_settings(base: Settings, index: int, out_dir: Path, backends: tuple[str, ...] = ()) -> Settings:
    """Node `index`'s settings: its own run folder and seed, and its engine from `backends` (in turn)."""
    seed = max(base.train.seed, 0) + index
    model = dataclasses.replace(base.model, backend=backends[index % len(backends)]) if backends else base.model
    return dataclasses.replace(
        base,
        model=model,
        run=dataclasses.replace(base.run, run_dir=str(out_dir / f"node-{index}"), ui=False),
        train=dataclasses.replace(base.train, seed=seed),
        peer=dataclasses.replace(base.peer, enabled=False),  # the demo hands each session its own node
    )


def default_out_dir() -> Path:
    return user_dirs().data / "demo" / time.strftime("%Y%m%d-%H%M%S")


async def run_demo_swarm(base: Settings, nodes: int, out_dir: Path,
                         on_session: Callable[[int, Session], None] | None = None,
                         backends: tuple[str, ...] = (), summaries: list[NodeSummary] | None = None) -> list[NodeSummary]:
    """Run the demo; `on_session(index, session)` is called as each node's session is made (a view
    subscribes there). `summaries`: the list to fill (one per node, as they go); a new one by default."""
    from swarm_app.peer.io.local_nodes import run_demo  # deferred: aiohttp

    summaries = summaries if summaries is not None else []
    summaries[:] = [NodeSummary(i) for i in range(nodes)]
    sessions: list[Session] = []
    # Models load one at a time: transformers' lazy imports are not thread-safe (two threads importing
    # AutoModelForCausalLM at once made one fail with ImportError), and it bounds the memory peak.
    opening = asyncio.Lock()
    loop = asyncio.get_running_loop()
    undo = on_stop_signals(loop, lambda: [s.stop() for s in sessions])

    async def run_node(index: int, node) -> None:
        summary = summaries[index]

        def on_event(event: Event) -> None:
            if isinstance(event, RoundFinished):
                m = event.metrics
                summary.rounds += 1
                summary.local_reward += m.reward_local_sum
                summary.total_reward += m.reward_local_sum + m.reward_external_sum
                summary.used += m.n_external

        options = SessionOptions(fresh=True, baseline=index == 0, final_evaluation=True)
        session = Session(node_settings(base, index, out_dir, backends), options, exchange=node)
        session.subscribe(on_event)
        sessions.append(session)
        if on_session is not None:
            on_session(index, session)
        try:
            async with opening:
                await asyncio.to_thread(session.open)
            summary.engine = session.backend_name
            await session.run()  # with its evaluations: none when the demo was stopped first
            for result, field in ((session.baseline_result, "baseline_acc"), (session.final_result, "heldout_acc")):
                if result is not None:
                    setattr(summary, field, result.accuracy)
                    summary.heldout_n = result.n
        except Exception as exc:  # one node's failure is shown in the summary; the others go on
            summary.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            stats = node.stats()
            summary.sent, summary.received = stats.published, stats.accepted
            session.close()

    try:
        await run_demo(nodes, run_node)
    finally:
        undo()
    return summaries


def format_summary(summaries: list[NodeSummary]) -> str:
    """One row per node; first, where node 0 measured it, the untouched model on the same held-out items."""
    lines = ["node  engine     rounds  cum. local reward  cum. total reward  held-out acc  sent  received  used"]
    base = next((s for s in summaries if s.baseline_acc is not None), None)
    if base is not None:
        lines.append(f"base  {base.engine or '-':<9}  {0:>6}  {'-':>17}  {'-':>17}  {base.baseline_acc:>12.3f}"
                     f"  (the untouched model on the same {base.heldout_n} held-out items)")
    for s in summaries:
        acc = f"{s.heldout_acc:.3f}" if s.heldout_acc is not None else "-"
        lines.append(f"{s.node:>4}  {s.engine or '-':<9}  {s.rounds:>6}  {s.local_reward:>17.1f}  "
                     f"{s.total_reward:>17.1f}  {acc:>12}"
                     f"  {s.sent:>4}  {s.received:>8}  {s.used:>4}" + (f"  FAILED: {s.error}" if s.error else ""))
    return "\n".join(lines)


def parse_backends(text: str | None) -> tuple[str, ...]:
    """`--backends A,B,...`: the engines of the nodes, in turn; an unknown name is a UsageError."""
    from backends import registry

    names = tuple(name.strip() for name in (text or "").split(",") if name.strip())
    unknown = [name for name in names if name not in registry.names()]
    if unknown:
        raise UsageError(f"--backends: unknown engine {', '.join(unknown)}; choose from {', '.join(registry.names())}")
    return names
