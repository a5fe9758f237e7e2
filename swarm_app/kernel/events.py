"""Typed, frozen events that a session publishes; the TUI, the headless view and `swarm watch` subscribe.

Events are past-tense facts holding only plain values (no models, no tensors, no live peer state), so
they cross from the training thread to the asyncio loop and into JSON unchanged. Progress events say
`replaceable = True`: a view that falls behind keeps only the newest of a kind (like toolong's
`can_replace`), so a slow terminal never queues stale progress. Requests go the other way, as method
calls on the session (pause, resume, set_sharing, evaluate_now, stop); they are not events.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from swarm_app.kernel.record import ParticipantRecord


@dataclass(frozen=True)
class Event:
    replaceable: ClassVar[bool] = False
    """True for progress: only the newest event of this type matters to a view."""

    def to_dict(self) -> dict[str, Any]:
        return {"event": type(self).__name__, **asdict(self)}


@dataclass(frozen=True)
class RoundMetrics:
    """One completed round: the row written to metrics.jsonl, field for field."""

    round: int
    reward_local: float
    """Mean reward of this node's own completions."""
    reward_external: float | None
    """Mean locally re-scored reward of the peers' groups trained on; None when none were used."""
    reward_local_sum: float
    reward_external_sum: float
    n_local: int
    n_external: int
    """Peers' groups trained on (only groups with a reward spread are taken)."""
    groups_with_signal: int
    """Groups of the update (own and external) whose rewards were not all equal."""
    tokens: int
    """Tokens this node generated."""
    train_tokens: int
    loss: float | None
    clipped_fraction: float | None
    gen_s: float
    train_s: float
    time: float
    round_s: float = 0.0
    threads: int | None = None
    """CPU threads the engine ran this round on (None: not a CPU engine, or not known)."""
    grad_norm: float | None = None
    """The update's gradient norm before clipping, the mean over its optimizer steps; None without an update."""
    steps: int | None = None
    """Optimizer steps the update took (epochs x minibatches); None without an update."""
    heldout_acc: float | None = None
    """Held-out accuracy, on evaluation rounds only."""
    heldout_n: int | None = None
    """Held-out items scored, on evaluation rounds only."""
    eval_s: float | None = None
    rss_bytes: int = 0
    """Resident memory of the process after the round (0: unknown)."""
    peers: int | None = None
    """Connected neighbours at the end of the round (None when the node is offline)."""
    pool: int | None = None
    rollouts_published: int | None = None
    rollouts_sent: int | None = None
    rollouts_accepted: int | None = None
    rollouts_rejected: int | None = None
    # What this node gave and got in this round (per round, so that sums over a run's rows survive restarts,
    # which reset the node's counters above); None when the node is offline or takes no peers' groups.
    shared: int | None = None
    """Own rollouts signed and offered to peers since the previous round's row."""
    pushed: int | None = None
    """Copies of own rollouts pushed to peers since the previous row (whether each peer kept it is not known)."""
    served: int | None = None
    """Copies of own rollouts handed to peers in answers to their pulls since the previous row."""
    used_from: dict[str, int] | None = None
    """Peers' groups (each with a reward spread) in this round's update, by author node id."""
    # Own versus external groups in the update (training/diagnostics.py defines each); None when a round
    # has no such group or the engine reports no per-sample figures.
    logp_own: float | None = None
    """Mean log-prob per token of own completions under this node's policy at the round's start."""
    logp_external: float | None = None
    """The same for peers' completions: how off-policy they are here."""
    clipped_own: float | None = None
    """Share of own samples' tokens the clip cut, over the update's steps."""
    clipped_external: float | None = None
    advantage_own: float | None = None
    """Mean |advantage| of the completions of own groups with a reward spread."""
    advantage_external: float | None = None
    signal_own: float | None = None
    """Share of own groups with a reward spread."""
    signal_external: float | None = None
    """Share of the peers' groups re-scored this round that had a reward spread."""
    external_checked: int | None = None
    """Valid peers' groups re-scored this round (those without a spread are dropped); None when J = 0."""
    reward_local_on_external_tasks: float | None = None
    """This node's own mean reward this round on the datasets of the peers' groups it used."""
    train_cpu_s: float | None = None
    """CPU seconds of the engine thread on this round, its evaluation left out (time.thread_time read on that
    thread, training/loop.py CpuLedger; at more than one engine thread their helpers are not counted): the
    measure `swarm experiment` compares configs at. None: a node of an earlier version."""
    train_cpu_total_s: float | None = None
    """`train_cpu_s` summed over the run's rounds so far, restarts included (the session adds it); None when
    a round of the run lacks the figure. The benefit meter's axis (kernel/benefit.py)."""

    @property
    def external_signal_share(self) -> float | None:
        """Share of the update's learning signal (groups with a reward spread) that came from peers."""
        return self.n_external / self.groups_with_signal if self.groups_with_signal else None

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ModelLoading(Event):
    """The model is being loaded (the slow part of start-up); `step` says what happens now."""

    model: str
    backend: str
    step: str


@dataclass(frozen=True)
class RunStarted(Event):
    run_dir: str
    backend: str
    backend_reason: str
    model_id: str
    preset: str
    start_round: int
    """The first round this process will run (1 for a new run)."""
    total_rounds: int
    """0: until stopped."""
    device: str = ""
    """Where the engine runs ("cpu", "cuda:0", ...)."""
    memory_bytes: int = 0
    """What the engine holds (model, adapter, optimizer)."""
    advice: str = ""
    """The hardware recommendation (threads, model size, batch) and why."""
    ram_total_bytes: int = 0
    """This machine's memory (0: not probed, e.g. for the fake engine)."""
    offline: bool = False
    """The node trains alone: no peer node, nothing shared or received (`--offline`)."""
    resources: str = ""
    """The resource level, thread policy and priority the node runs with ("level full, threads adapt
    within 1-2, nice 10")."""
    external: int | None = None
    """J: peers' groups the node trains on per round (0: it shares but learns only from its own groups;
    None: not said, a node of an earlier version)."""


@dataclass(frozen=True)
class SoloCurveFound(Event):
    """A held-out curve of the same model trained alone (J = 0), to set beside this node's: the solo arm of a
    `swarm experiment`, or a solo run in the data folder. Published after RunStarted when the node learns
    from peers (J > 0) and one is found; no event means there is none."""

    source: str
    """Where it comes from, in words ("swarm experiment in ~/x, config 8/0, mean of 3 seeds")."""
    rounds: tuple[int, ...]
    accuracy: tuple[float, ...]
    """Held-out accuracy at each of `rounds` (round 0: the untouched model, where known)."""
    cpu_s: tuple[float, ...] = ()
    """Engine-thread CPU seconds a solo node had spent by each of `rounds`, evaluations left out (the measure
    of `RoundMetrics.train_cpu_total_s`); empty: not known, and there is no comparison at equal CPU."""
    n: int = 0
    """Held-out items scored at each point (0: not known)."""
    spread: tuple[float, ...] = ()
    """Standard deviation of the accuracy over `seeds` seeds at each point, for a mean of seeds; else empty."""
    seeds: int = 1
    engine: str = ""
    """The engine that measured `cpu_s` ("llama_cpp"; "": not known)."""
    threads: int = 0
    """Engine threads per node it ran at (0: not known). CPU time is the engine thread's, so only a node at
    the same thread count is compared at equal CPU."""


@dataclass(frozen=True)
class SwarmJoined(Event):
    node_id: str
    address: str
    swarm: str = ""
    """The swarm's name (nodes of other swarms are refused)."""
    bootstrap: int = 0
    """Addresses it dials first (bootstrap and --peer); more come from mDNS, the peer table, peer exchange."""
    port: int = 0
    """The port peers would dial: the one to forward on a home router (0: reachability is not checked)."""
    dht: bool = False
    """Whether the node looks its swarm up by name on the Mainline DHT (on, and libtorrent installed)."""
    dns_seeds: int = 0
    """DNS names whose records list more addresses to dial first (`--bootstrap dns:NAME`)."""


@dataclass(frozen=True)
class RoundStarted(Event):
    round: int


@dataclass(frozen=True)
class PhaseProgress(Event):
    """Progress inside a round: phase is "generating", "scoring", "sharing" or "training"."""

    replaceable: ClassVar[bool] = True
    round: int
    phase: str
    done: int
    total: int


@dataclass(frozen=True)
class RoundFinished(Event):
    metrics: RoundMetrics


EVALUATION_KINDS = ("scheduled", "requested", "baseline", "final")
"""Why a held-out evaluation ran: every train.eval_every rounds (its result is on the round's row), `e` in
the TUI, the untouched model before `swarm demo` trains, and `swarm demo`'s evaluation after its last round.
All but "scheduled" are rows of their own in metrics.jsonl (training/metrics_log.py)."""


@dataclass(frozen=True)
class EvaluationStarted(Event):
    round: int
    """The last completed round (0: the untouched model)."""
    n: int
    kind: str = "scheduled"


@dataclass(frozen=True)
class EvaluationProgress(Event):
    """Held-out questions answered so far in the evaluation under way."""

    replaceable: ClassVar[bool] = True
    round: int
    done: int
    total: int
    kind: str = "scheduled"


@dataclass(frozen=True)
class EvaluationFinished(Event):
    round: int
    accuracy: float
    per_task: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    kind: str = "scheduled"
    n: int = 0
    """Held-out questions scored (0: not said, from a node of an earlier version)."""


@dataclass(frozen=True)
class RolledBack(Event):
    """Held-out accuracy fell below the best by more than its noise (training/rollback.py): the node went
    back to the best checkpoint's adapter after round `round`; the round counter goes on."""

    round: int
    to_round: int
    best: float
    now: float
    threshold: float
    n: int

    @property
    def text(self) -> str:
        """The line the views show."""
        return (f"rolled back after round {self.round} to the adapter of round {self.to_round}: held-out accuracy "
                f"{self.now:.3f} fell below the best {self.best:.3f} by more than its noise ({self.threshold:.3f} "
                f"at {self.n} questions)")


@dataclass(frozen=True)
class RecordUpdated(Event):
    """The run's participant record (kernel/record.py) after a row was written: at the start, after each round
    and after each evaluation."""

    replaceable: ClassVar[bool] = True
    record: ParticipantRecord


@dataclass(frozen=True)
class CheckpointSaved(Event):
    round: int
    path: str


@dataclass(frozen=True)
class PeerRow:
    """One peer as the views show it (a copy of the peer node's snapshot, plain values only)."""

    node_id: str
    address: str
    connected: bool
    reachable: bool
    """This node dialed it (so others can too), rather than only hearing from it."""
    latency_ms: float | None
    received: int
    accepted: int
    rejected: int
    main_rejection: str
    used: int
    last_seen: float
    """Unix time this node last heard from the peer (0: never)."""


@dataclass(frozen=True)
class PeersUpdated(Event):
    """The swarm as this node sees it, about once a second while the node is online."""

    replaceable: ClassVar[bool] = True
    peers: tuple[PeerRow, ...]
    sharing: bool
    published: int
    sent: int
    accepted: int
    rejected: int
    pool: int
    swarm: str = ""
    reachable: bool | None = None
    """Whether peers can dial this node from outside (dial-back); None: not known yet."""
    port: int = 0
    """The port peers are asked to dial back."""
    witnesses: int = 0
    """Networks whose peers dialed this node back in the current check."""
    witnesses_needed: int = 0
    upnp: str = ""
    """The router port mapping: "", "missing", "none" or "mapped" (the router's word; dial-back decides)."""
    lan_only: bool = False
    """Only peers on this network dialed it back: the internet is not known."""


@dataclass(frozen=True)
class ReachabilityChanged(Event):
    """Dial-back reached a verdict, or changed it: whether peers outside can dial this node."""

    reachable: bool
    port: int
    peers: int
    """Connected neighbours now."""
    swarm: str = ""
    upnp: str = ""
    lan_only: bool = False
    """Only peers on this network dialed it back: the internet is not known."""


@dataclass(frozen=True)
class HubStarted(Event):
    """A hub (`swarm hub`: a node without a model) is listening and looking for its swarm."""

    node_id: str
    address: str
    swarm: str
    max_inbound: int
    """Inbound links it holds at most."""
    bootstrap: int = 0
    port: int = 0
    """The port peers are asked to dial back (0: reachability is not checked)."""
    dht: bool = False
    dns_seeds: int = 0


@dataclass(frozen=True)
class HubStatus(Event):
    """A hub's last minute (`interval_s`): its links now, and what it received and handed on meanwhile."""

    links_in: int
    links_out: int
    admitted: int
    """Peer rollouts that passed admission (re-scored) in the interval."""
    relayed: int
    """Rollouts handed to peers in pull answers in the interval (a hub has none of its own)."""
    rejected: int
    bytes_in: int
    """Bytes of websocket messages received in the interval."""
    bytes_out: int
    pool: int
    """Rollouts in the pool now."""
    interval_s: float = 60.0
    reachable: bool | None = None
    lan_only: bool = False
    """Only peers on this network dialed it back: the internet is not known."""


@dataclass(frozen=True)
class TrainingPaused(Event):
    after_round: int
    reason: str = ""
    """Why, when a rule paused it ("on battery", "the computer is in use ..."); "" when the user did."""
    resumes: str = ""
    """When a rule's pause ends, in words ("when the power is plugged in")."""


@dataclass(frozen=True)
class TrainingResumed(Event):
    pass


@dataclass(frozen=True)
class SharingChanged(Event):
    sharing: bool


@dataclass(frozen=True)
class LogRecorded(Event):
    """A log record of this run (warnings carry their next step in the message)."""

    level: str
    message: str
    time: float


@dataclass(frozen=True)
class RunStopped(Event):
    last_round: int
    reason: str
    """"finished", "interrupted", "error" or "already finished"."""
    run_dir: str = ""
    adapter: str = ""
    """The newest checkpoint folder ("" when none was written)."""


@dataclass(frozen=True)
class ChatReplied(Event):
    """The answer so far to the chat view's prompt number `asked` (whole text, so a newer one replaces an
    older one); `done` once complete, `error` when it failed. From the chat process (swarm_app/chat/child.py),
    never on a session's bus: chatting leaves the run and its events alone."""

    replaceable: ClassVar[bool] = True
    asked: int
    text: str
    done: bool = False
    source: str = ""
    """What answers, in words (a checkpoint's round, or the base model)."""
    error: str = ""


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event of this module from its `to_dict()` (the JSON that `swarm watch` receives).

    Nested RoundMetrics and tuples of PeerRow are rebuilt; dict fields stay dicts. Keys the class does
    not have are ignored (a newer node may add optional fields); an unknown event name, a missing field
    or a value of the wrong type raises ValueError, so one bad message never reaches a view.
    """
    if not isinstance(data, dict):
        raise ValueError(f"an event is an object, not {type(data).__name__}")
    classes = {cls.__name__: cls for cls in _subclasses(Event) if cls.__module__ == __name__}
    cls = classes.get(data.get("event"))  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown event {data.get('event')!r}")
    return _build(cls, {key: value for key, value in data.items() if key != "event"})


def _subclasses(cls: type) -> list[type]:
    return [sub for direct in cls.__subclasses__() for sub in (direct, *_subclasses(direct))]


def _build(cls: type, values: Any) -> Any:
    import dataclasses
    import typing

    if not isinstance(values, dict):
        raise ValueError(f"{cls.__name__}: expected an object, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)  # the annotations are strings (from __future__ import annotations)
    known = {f.name: f for f in dataclasses.fields(cls)}
    missing = [name for name, f in known.items() if name not in values
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{cls.__name__}: missing {', '.join(missing)}")
    return cls(**{name: _convert(hints[name], values[name], f"{cls.__name__}.{name}")
                  for name in known if name in values})


def _convert(hint: Any, value: Any, where: str) -> Any:
    """`value` as the field type `hint` says, or ValueError. Covers the types the events use."""
    import dataclasses
    import types
    import typing

    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        others = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if value is None and len(others) < len(typing.get_args(hint)):
            return None
        (hint,) = others  # every Optional here wraps exactly one type
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)
    if origin is tuple and isinstance(value, (list, tuple)):
        return tuple(_convert(args[0], item, where) for item in value)
    if origin is dict and isinstance(value, dict):
        return dict(value)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is float and is_number:
        return float(value)
    if (hint is int and is_number and isinstance(value, int)) or (hint in (str, bool) and isinstance(value, hint)):
        return value
    raise ValueError(f"{where}: {value!r} is not a {getattr(hint, '__name__', hint)}")
