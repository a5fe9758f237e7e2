"""What the TUI shows, folded from session events: pure data, no Textual, no clock.

`ViewState.apply(event)` is the only way in, so a deterministic list of events (a test script, or
the JSON lines `swarm watch` receives) always draws the same screen. Everything a peer could have
written (addresses, model ids) passes through `safe_text` before it is kept.
"""

from __future__ import annotations

import re
import unicodedata
from collections import deque
from dataclasses import dataclass, field, replace

from swarm_app.kernel.benefit import Comparison, NoComparison, compare, interpolate
from swarm_app.kernel.events import (
    CheckpointSaved,
    EvaluationFinished,
    EvaluationProgress,
    EvaluationStarted,
    Event,
    LogRecorded,
    ModelLoading,
    PeerRow,
    PeersUpdated,
    PhaseProgress,
    RecordUpdated,
    RolledBack,
    RoundFinished,
    RoundStarted,
    RunStarted,
    RunStopped,
    SharingChanged,
    SoloCurveFound,
    SwarmJoined,
    TrainingPaused,
    TrainingResumed,
)
from swarm_app.kernel.record import ParticipantRecord

MOVING_AVERAGE = 10
"""Rounds in the chart's moving average: the bundled model's per-round reward swings by +-0.2."""
LOG_LINES = 2000
LEVELS = ("debug", "info", "warning", "error", "critical")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def safe_text(text: str, limit: int = 200) -> str:
    """Peer-supplied text with control characters and escape sequences made harmless (shown as
    U+FFFD), cut to `limit` characters."""
    cleaned = _CONTROL.sub("\ufffd", text)
    cleaned = "".join(c if unicodedata.category(c) not in ("Cf", "Cs", "Co") else "\ufffd" for c in cleaned)
    return cleaned[:limit]


def moving_average(values: list[float], window: int = MOVING_AVERAGE) -> list[float]:
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


@dataclass
class Curves:
    rounds: list[int] = field(default_factory=list)
    local: list[float] = field(default_factory=list)
    external_rounds: list[int] = field(default_factory=list)
    external: list[float] = field(default_factory=list)
    heldout_rounds: list[int] = field(default_factory=list)
    heldout: list[float] = field(default_factory=list)
    heldout_n: list[int] = field(default_factory=list)
    """Held-out items of each evaluation (0: not said)."""
    cpu: dict[int, float] = field(default_factory=lambda: {0: 0.0})
    """Engine CPU seconds the run had spent by each round, evaluations left out (`train_cpu_total_s`)."""
    threads: set[int] = field(default_factory=set)
    """Engine thread counts the rounds ran at (as far as the rows say)."""
    per_task: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


@dataclass
class ViewState:
    status: str = "starting"
    """starting, loading, training, paused, stopped."""
    loading_step: str = ""
    model: str = ""
    backend: str = ""
    backend_reason: str = ""
    device: str = ""
    memory_bytes: int = 0
    process_bytes: int = 0
    ram_total_bytes: int = 0
    preset: str = ""
    run_dir: str = ""
    node_id: str = ""
    address: str = ""
    swarm: str = ""
    """The swarm joined (SwarmJoined, then every PeersUpdated)."""
    port: int = 0
    """The port peers would dial: the one to forward on a home router."""
    reachable: bool | None = None
    """Whether peers can dial this node from outside; None: not known yet."""
    lan_only: bool = False
    """Only peers on this network dialed it back."""
    witnesses: int = 0
    witnesses_needed: int = 0
    upnp: str = ""
    total_rounds: int = 0
    round: int = 0
    phase: str = ""
    phase_done: int = 0
    phase_total: int = 0
    evaluating: bool = False
    eval_kind: str = ""
    """Why the evaluation under way runs (events.EVALUATION_KINDS)."""
    eval_done: int = 0
    eval_total: int = 0
    offline: bool = False
    """The node trains alone (`--offline`): nothing to share."""
    resources: str = ""
    """Resource level, thread policy and priority (RunStarted.resources)."""
    pause_reason: str = ""
    """Why a rule paused training ("on battery"), and when it resumes; "" when the user paused it."""
    last_round_s: float | None = None
    round_seconds: deque = field(default_factory=lambda: deque(maxlen=20))
    tokens_per_s: float | None = None
    sharing: bool = True
    external: int | None = None
    """J: peers' groups the node trains on per round (RunStarted; 0: none, None: not said)."""
    solo: SoloCurveFound | None = None
    """A held-out curve of the same model trained alone, to compare with (none found: None)."""
    last_warning: str = ""
    last_checkpoint: str = ""
    record: ParticipantRecord | None = None
    """The run's participant record (RecordUpdated); None until the node sends one."""
    rollbacks: list = field(default_factory=list)
    """RolledBack events of this run so far (automatic rollback to the best-evaluated checkpoint)."""
    stop_line: str = ""
    curves: Curves = field(default_factory=Curves)
    peers: tuple[PeerRow, ...] = ()
    swarm_totals: PeersUpdated | None = None
    external_groups: int = 0
    signal_groups: int = 0
    logs: deque = field(default_factory=lambda: deque(maxlen=LOG_LINES))

    def apply(self, event: Event) -> None:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    # --- derived figures
    @property
    def eta_s(self) -> float | None:
        """Seconds to the last round at the recent pace; None when open-ended or not yet measured."""
        if not self.total_rounds or not self.round_seconds:
            return None
        per_round = sum(self.round_seconds) / len(self.round_seconds)
        return per_round * max(self.total_rounds - self.round, 0)  # `round` is the last completed one

    @property
    def connected_peers(self) -> int:
        return sum(1 for row in self.peers if row.connected)

    @property
    def peer_signal_share(self) -> float | None:
        """Share of the groups with a reward spread in this node's updates that came from peers."""
        return self.external_groups / self.signal_groups if self.signal_groups else None


def benefit(s: ViewState) -> Comparison | NoComparison | None:
    """The node's last held-out point against the solo curve at equal engine CPU (kernel/benefit.py); None
    without both a solo curve and an evaluation."""
    c = s.curves
    if s.solo is None or not c.heldout:
        return None
    unlike = _unlike_cpu(s)
    if unlike is not None:
        return unlike
    at = c.heldout_rounds[-1]
    if at not in c.cpu:
        return NoComparison(f"engine CPU of the rounds to {at} not recorded")
    solo = s.solo
    return compare(c.heldout[-1], c.heldout_n[-1], c.cpu[at], solo.cpu_s, solo.accuracy, solo.n, solo.spread,
                   solo.seeds)


def solo_at_node_cpu(s: ViewState) -> list[tuple[int, float]]:
    """(round, the solo curve's accuracy at the engine CPU this node had spent by then), for the chart: only
    where the figures compare (see `benefit`), inside the solo curve, and while a peer is connected."""
    if s.solo is None or not s.solo.cpu_s or _unlike_cpu(s) is not None or not s.connected_peers:
        return []
    read = ((t, interpolate(s.solo.cpu_s, s.solo.accuracy, cpu)) for t, cpu in sorted(s.curves.cpu.items()))
    return [(t, a) for t, a in read if a is not None]


def _unlike_cpu(s: ViewState) -> NoComparison | None:
    """Why this node's CPU figures do not measure what the solo curve's do: another engine, or another engine
    thread count (the figure is the engine thread's CPU time, so its helpers are not in it)."""
    solo, threads = s.solo, s.curves.threads
    if solo.engine and s.backend and solo.engine != s.backend:
        return NoComparison(f"the solo curve ran on {solo.engine}, this node on {s.backend}: CPU not comparable")
    if solo.threads and threads and threads != {solo.threads}:
        ran = "/".join(str(t) for t in sorted(threads))
        return NoComparison(f"the solo curve ran {solo.threads} engine thread(s) a node, this node {ran}: "
                            "CPU not comparable")
    return None


def _run_started(s: ViewState, e: RunStarted) -> None:
    s.status, s.model, s.backend, s.backend_reason = "training", safe_text(e.model_id), e.backend, e.backend_reason
    s.device, s.memory_bytes, s.preset, s.run_dir = e.device, e.memory_bytes, e.preset, e.run_dir
    s.ram_total_bytes, s.offline, s.resources = e.ram_total_bytes, e.offline, e.resources
    s.total_rounds, s.round, s.external = e.total_rounds, e.start_round - 1, e.external


def _loading(s: ViewState, e: ModelLoading) -> None:
    s.status, s.loading_step, s.model, s.backend = "loading", e.step, safe_text(e.model), e.backend


def _round_started(s: ViewState, e: RoundStarted) -> None:
    s.phase, s.phase_done, s.phase_total = "generating", 0, 0


def _progress(s: ViewState, e: PhaseProgress) -> None:
    s.phase, s.phase_done, s.phase_total = e.phase, e.done, e.total


def _round_finished(s: ViewState, e: RoundFinished) -> None:
    m, c = e.metrics, s.curves
    s.round, s.phase, s.last_round_s = m.round, "", m.round_s
    s.round_seconds.append(m.round_s)
    s.process_bytes = m.rss_bytes or s.process_bytes
    s.tokens_per_s = m.tokens / m.gen_s if m.gen_s > 0 else None
    c.rounds.append(m.round)
    c.local.append(m.reward_local)
    if m.reward_external is not None:
        c.external_rounds.append(m.round)
        c.external.append(m.reward_external)
    if m.train_cpu_total_s is not None:
        c.cpu[m.round] = m.train_cpu_total_s
    if m.threads:
        c.threads.add(m.threads)
    s.external_groups += m.n_external
    s.signal_groups += m.groups_with_signal


def _evaluating(s: ViewState, e: EvaluationStarted) -> None:
    s.evaluating, s.eval_kind, s.eval_done, s.eval_total = True, e.kind, 0, e.n


def _evaluation_progress(s: ViewState, e: EvaluationProgress) -> None:
    s.eval_done, s.eval_total = e.done, e.total


def _evaluated(s: ViewState, e: EvaluationFinished) -> None:
    s.evaluating = False
    s.curves.heldout_rounds.append(e.round)
    s.curves.heldout.append(e.accuracy)
    s.curves.heldout_n.append(e.n)
    for task, accuracy in e.per_task.items():
        s.curves.per_task.setdefault(task, []).append((e.round, accuracy))


def _log(s: ViewState, e: LogRecorded) -> None:
    record = LogRecorded(e.level, safe_text(e.message, 2000), e.time)
    s.logs.append(record)
    if e.level in ("warning", "error", "critical"):
        s.last_warning = f"{e.level}: {record.message}"


def _peers(s: ViewState, e: PeersUpdated) -> None:
    s.peers = tuple(_safe_row(r) for r in e.peers)
    s.swarm_totals, s.sharing = e, e.sharing
    s.swarm, s.port = safe_text(e.swarm, 64) or s.swarm, e.port
    s.reachable, s.witnesses, s.witnesses_needed, s.upnp = e.reachable, e.witnesses, e.witnesses_needed, e.upnp
    s.lan_only = e.lan_only


def _joined(s: ViewState, e: SwarmJoined) -> None:
    s.node_id, s.address, s.swarm, s.port = e.node_id, e.address, safe_text(e.swarm, 64), e.port


def _safe_row(r: PeerRow) -> PeerRow:
    return replace(r, node_id=safe_text(r.node_id, 64), address=safe_text(r.address, 80),
                   main_rejection=safe_text(r.main_rejection, 40))


def _stopped(s: ViewState, e: RunStopped) -> None:
    s.status, s.phase = "stopped", ""
    s.stop_line = f"stopped after round {e.last_round} ({e.reason})"
    s.last_checkpoint = e.adapter or s.last_checkpoint


def _record(s: ViewState, e: RecordUpdated) -> None:
    peers = {safe_text(node_id, 64): groups for node_id, groups in e.record.top_peers.items()}
    s.record = replace(e.record, top_peers=peers)


def _set(**values):
    def handler(s: ViewState, e: Event) -> None:
        for name, value in values.items():
            setattr(s, name, value(e) if callable(value) else value)
    return handler


_HANDLERS = {
    ModelLoading: _loading,
    RunStarted: _run_started,
    SwarmJoined: _joined,
    RoundStarted: _round_started,
    PhaseProgress: _progress,
    RoundFinished: _round_finished,
    EvaluationStarted: _evaluating,
    EvaluationProgress: _evaluation_progress,
    EvaluationFinished: _evaluated,
    CheckpointSaved: _set(last_checkpoint=lambda e: e.path),
    PeersUpdated: _peers,
    TrainingPaused: _set(status="paused", pause_reason=lambda e: f"{e.reason}; resumes {e.resumes}" if e.reason else ""),
    TrainingResumed: _set(status="training", pause_reason=""),
    SharingChanged: _set(sharing=lambda e: e.sharing),
    SoloCurveFound: _set(solo=lambda e: replace(e, source=safe_text(e.source))),
    LogRecorded: _log,
    RolledBack: lambda s, e: s.rollbacks.append(e),
    RecordUpdated: _record,
    RunStopped: _stopped,
}
