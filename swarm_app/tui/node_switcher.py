"""`swarm demo` in the TUI: every node of the local swarm in one app, `n` switches between them.

The demo's sessions appear one by one as their models load; each is subscribed as node i and its
request methods become node i's controls, so p, s and e act on the node shown and q stops them all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from swarm_app.session.local_swarm import NodeSummary, run_demo_swarm
from swarm_app.kernel.settings import Settings
from swarm_app.tui.app import SwarmApp


def run_demo_in_tui(settings: Settings, nodes: int, out_dir: Path, backends: tuple[str, ...] = ()) -> list[NodeSummary]:
    controls: dict = {}
    summaries: list[NodeSummary] = []

    async def source(deliver) -> None:
        def on_session(index: int, session) -> None:
            controls[index] = session
            session.subscribe(lambda event: deliver(event, index))

        summaries.extend(await run_demo_swarm(settings, nodes, out_dir, on_session=on_session, backends=backends))
        if not any(session.stopping for session in controls.values()):
            await asyncio.Event().wait()  # the demo ran to its end: keep the picture until q

    app = SwarmApp(source, nodes=nodes, node_controls=controls, subtitle=f"demo in {out_dir}")
    app.run()
    if app.error is not None:
        raise app.error
    return summaries
