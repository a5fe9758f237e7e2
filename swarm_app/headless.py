"""The headless view (`--no-ui`): one readable line per round, or one JSON object per event.

It subscribes to session events like the TUI does and is the only place besides the CLI that prints.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TextIO

from swarm_app.events import CheckpointSaved, Event, RoundFinished, RunStarted, RunStopped, SwarmJoined


class HeadlessView:
    def __init__(self, log_format: str = "text", stream: TextIO | None = None, prefix: str = "",
                 total_rounds: int = 0) -> None:
        self.log_format = log_format
        self.stream: TextIO | None = stream or sys.stdout
        self.prefix = prefix
        """Put before every text line (`swarm demo` names the node)."""
        self.total_rounds = total_rounds

    def __call__(self, event: Event) -> None:
        if self.log_format == "json":
            self._write(json.dumps(event.to_dict(), default=str))
            return
        line = self.format(event)
        if line:
            self._write(self.prefix + line)

    def format(self, event: Event) -> str:
        if isinstance(event, RunStarted):
            self.total_rounds = event.total_rounds
            until = f"up to round {event.total_rounds}" if event.total_rounds else "until stopped (Ctrl-C)"
            return (f"run {event.run_dir}: model {event.model_id} on {event.backend} ({event.backend_reason}); "
                    f"tasks {event.preset}; starting at round {event.start_round}, {until}")
        if isinstance(event, RoundFinished):
            return format_round(event.metrics, self.total_rounds)
        if isinstance(event, SwarmJoined):
            return f"swarm: node {event.node_id} listening on {event.address}"
        if isinstance(event, RunStopped):
            if event.reason == "already finished":
                return (f"this run already finished its {event.last_round} rounds; nothing to do "
                        "(raise --rounds to go on, or start over with --fresh)")
            return f"stopped after round {event.last_round} ({event.reason})"
        if isinstance(event, CheckpointSaved):
            return ""  # every round would double the output; the JSON format has it
        return ""

    def _write(self, line: str) -> None:
        if self.stream is None:
            return
        try:
            print(line, file=self.stream, flush=True)
        except BrokenPipeError:
            # the reader went away (`swarm run | head`): keep training and checkpointing, stop printing
            self.stream = None
            sys.stdout = open(os.devnull, "w", encoding="utf-8")


def format_round(row: dict, total: int) -> str:
    of = f"/{total}" if total else ""
    external = row.get("reward_external")
    parts = [f"round {row['round']}{of}",
             f"reward local {row['reward_local']:.3f}",
             f"external {external:.3f} ({row['n_external']} groups)" if external is not None else "external -"]
    if row.get("heldout_acc") is not None:
        parts.append(f"held-out acc {row['heldout_acc']:.3f}")
    if row.get("peers") is not None:
        parts.append(f"peers {row['peers']} (in {row['rollouts_accepted']}, out {row['rollouts_sent']})")
    parts.append(f"gen {row['gen_s']:.1f}s train {row['train_s']:.1f}s")
    return "  ".join(parts)
