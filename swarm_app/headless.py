"""The headless view (`--no-ui`): readable lines, or one JSON object per event (`--log-format json`).

It subscribes to session events like the TUI does and is the only place besides the CLI that prints.
Progress events (replaceable) and the per-second peer snapshots are left out of both formats: a log
line per decode step would bury the round lines.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TextIO

from swarm_app.kernel.events import (
    EvaluationFinished,
    Event,
    HubStarted,
    HubStatus,
    ModelLoading,
    ReachabilityChanged,
    RolledBack,
    RoundFinished,
    RoundMetrics,
    RunStarted,
    RunStopped,
    SharingChanged,
    SoloCurveFound,
    SwarmJoined,
    TrainingPaused,
    TrainingResumed,
)
from swarm_app.kernel.swarms import reachability_fix, reachability_text


class HeadlessView:
    def __init__(self, log_format: str = "text", stream: TextIO | None = None, prefix: str = "",
                 total_rounds: int = 0) -> None:
        self.log_format = log_format
        self.stream: TextIO | None = stream or sys.stdout
        self.prefix = prefix
        """Put before every text line (`swarm demo` names the node)."""
        self.total_rounds = total_rounds

    def __call__(self, event: Event) -> None:
        if event.replaceable:
            return
        if self.log_format == "json":
            self._write(json.dumps(event.to_dict(), default=str))
            return
        line = self.format(event)
        if line:
            self._write(self.prefix + line)

    def format(self, event: Event) -> str:
        if isinstance(event, ModelLoading):
            return f"{event.step}: model {event.model}, engine {event.backend}"
        if isinstance(event, RunStarted):
            self.total_rounds = event.total_rounds
            until = f"up to round {event.total_rounds}" if event.total_rounds else "until stopped (Ctrl-C)"
            network = "offline (no peers: nothing shared or received)" if event.offline else "joining the swarm"
            line = (f"run {event.run_dir}: model {event.model_id} on {event.backend} ({event.backend_reason}); "
                    f"tasks {event.preset}; {network}; starting at round {event.start_round}, {until}")
            return (line + (f"\nmachine: {event.advice}" if event.advice else "")
                    + (f"\nresources: {event.resources}" if event.resources else ""))
        if isinstance(event, RoundFinished):
            return format_round(event.metrics, self.total_rounds)
        if isinstance(event, SwarmJoined):
            return format_joined(event)
        if isinstance(event, ReachabilityChanged):
            return format_reachability(event)
        if isinstance(event, HubStarted):
            return format_hub_started(event)
        if isinstance(event, HubStatus):
            return format_hub_status(event)
        if isinstance(event, RunStopped):
            return format_stop(event)
        if isinstance(event, EvaluationFinished) and event.kind != "scheduled":  # a scheduled one is on the round line
            return format_evaluation(event)
        return _short_line(event)

    def _write(self, line: str) -> None:
        if self.stream is None:
            return
        try:
            print(line, file=self.stream, flush=True)
        except BrokenPipeError:
            # the reader went away (`swarm run | head`): keep training and checkpointing, stop printing
            self.stream = None
            sys.stdout = open(os.devnull, "w", encoding="utf-8")


def _short_line(event: Event) -> str:
    if isinstance(event, TrainingPaused):
        if event.reason:
            return (f"paused: {event.reason} after round {event.after_round}; resumes {event.resumes} "
                    "(the node keeps serving its peers)")
        return f"paused after round {event.after_round} (the swarm keeps going)"
    if isinstance(event, TrainingResumed):
        return "resumed"
    if isinstance(event, SharingChanged):
        return "sharing own rollouts" if event.sharing else "not sharing own rollouts (still receiving)"
    if isinstance(event, RolledBack):
        return event.text
    if isinstance(event, SoloCurveFound):
        return format_solo(event)
    # Not printed: scheduled evaluations (the round line carries held-out accuracy and eval time) and
    # peers coming and going (rotation every minute); the JSON format has them.
    return ""


def format_solo(e: SoloCurveFound) -> str:
    """The solo curve the dashboard compares held-out accuracy with at equal engine CPU (kernel/benefit.py)."""
    end = f"{e.accuracy[-1]:.3f} at round {e.rounds[-1]}"
    if not e.cpu_s:
        return f"solo curve: {e.source} ({end}); it has no engine CPU figures, so nothing is compared"
    return (f"held-out compared at equal engine CPU with: {e.source} ({end}, {e.cpu_s[-1]:,.0f} engine CPU s, "
            f"{e.n} items)")


def format_joined(e: SwarmJoined) -> str:
    """The start line of a networked node: which swarm, where it listens, where it looks for peers, and
    that whether it is reachable from outside is being checked."""
    name = f"swarm {e.swarm!r}" if e.swarm else "swarm"
    others = "the DHT by the swarm's name, the LAN and the saved peer table" if e.dht else \
        "the LAN and the saved peer table"
    dialing = [f"dialing {e.bootstrap} bootstrap address{'es' if e.bootstrap > 1 else ''}"] if e.bootstrap else []
    dialing += [_dns_seeds(e.dns_seeds)] if e.dns_seeds else []
    where = (f"{' and '.join(dialing)}; looking on {others}" if dialing
             else f"no bootstrap address (none ships: give one with --bootstrap HOST:PORT); looking on {others}")
    line = f"{name}: node {e.node_id} listening on {e.address}; {where}; 0 peers so far (training goes on meanwhile)"
    return line + (f"\nreachable from outside: checking (asking peers to dial port {e.port} back)" if e.port else "")


def _dns_seeds(count: int) -> str:
    return f"asking {count} DNS seed{'s' if count > 1 else ''} for addresses (now and every 10 minutes)"


def format_hub_started(e: HubStarted) -> str:
    """The start line of `swarm hub`: what it is, where it listens, where it looks, what it holds."""
    others = ("looking on the DHT by the swarm's name (announcing there once reachable)" if e.dht
              else "DHT off (--no-dht, or the [dht] extra is missing)")
    where = f"dialing {e.bootstrap} address{'es' if e.bootstrap != 1 else ''}" if e.bootstrap else "no bootstrap address"
    where += f" and {_dns_seeds(e.dns_seeds)}" if e.dns_seeds else ""
    line = (f"hub for swarm {e.swarm!r}: node {e.node_id} listening on {e.address} (no model: it admits, relays and "
            f"answers dial-backs; up to {e.max_inbound} inbound links); {where}; {others}; "
            f"a status line every minute")
    return line + (f"\nreachable from outside: checking (asking peers to dial port {e.port} back)" if e.port else "")


def format_hub_status(e: HubStatus) -> str:
    """A hub's minute: links now; rollouts admitted and relayed, bytes in and out, in the interval."""
    per = "minute" if round(e.interval_s) == 60 else f"{e.interval_s:.0f}s"
    reach = ("reachable on this network only" if e.reachable and e.lan_only else
             {True: "reachable", False: "not reachable", None: "reachability unknown"}[e.reachable])
    return (f"hub: links {e.links_in} in, {e.links_out} out ({reach}); last {per}: rollouts admitted "
            f"{e.admitted}, relayed {e.relayed}, rejected {e.rejected}; bytes in {_size(e.bytes_in)}, out "
            f"{_size(e.bytes_out)}; pool {e.pool}")


def _size(n: int) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_reachability(e: ReachabilityChanged) -> str:
    peers = f"{e.peers} peer{'s' if e.peers != 1 else ''}"
    swarm = f"swarm {e.swarm!r}, " if e.swarm else ""
    line = f"{swarm}{peers}: {reachability_text(e.reachable, e.port, e.lan_only)}"
    return line if e.reachable else f"{line}\n  {reachability_fix(e.port, e.upnp)}"


def format_evaluation(e: EvaluationFinished) -> str:
    what = {"baseline": "the untouched model (baseline)", "final": f"after the last round ({e.round})",
            "requested": f"after round {e.round}, as asked"}.get(e.kind, f"after round {e.round}")
    on = f" on {e.n} questions" if e.n else ""
    return f"held-out evaluation, {what}: accuracy {e.accuracy:.3f}{on} ({e.seconds:.1f}s)"


def format_round(m: RoundMetrics, total: int) -> str:
    of = f"/{total}" if total else ""
    parts = [f"round {m.round}{of}",
             f"reward local {m.reward_local:.3f}",
             f"external {m.reward_external:.3f} ({m.n_external} groups)" if m.reward_external is not None else "external -"]
    if m.heldout_acc is not None:
        parts.append(f"held-out acc {m.heldout_acc:.3f}")
    if m.peers is not None:
        parts.append(f"peers {m.peers} (in {m.rollouts_accepted}, out {m.rollouts_sent})")
    timing = f"gen {m.gen_s:.1f}s train {m.train_s:.1f}s"
    if m.eval_s is not None:
        timing += f" eval {m.eval_s:.1f}s"
    parts.append(timing)
    return "  ".join(parts)


def format_stop(event: RunStopped) -> str:
    if event.reason == "already finished":
        head = (f"this run already finished its {event.last_round} rounds; nothing to do "
                "(raise --rounds to go on, or start over with --fresh)")
    else:
        head = f"stopped after round {event.last_round} ({event.reason})"
    if not event.run_dir:
        return head
    lines = [head, f"  run folder {event.run_dir} (metrics.jsonl: one row per round)"]
    if event.adapter:
        lines += [f"  adapter    {event.adapter}",
                  f"  evaluate:  swarm eval --adapter {event.run_dir}"]
    return "\n".join(lines)
