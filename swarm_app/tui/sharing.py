"""The dashboard's sharing panel: what sharing did for this node, in three to five lines a participant can read.

1. reward: the mean of its own groups and of the peers' groups it trained on, over the last rounds, each
   with a sparkline (one character a round, 0 to 1);
2. the share of its learning signal that came from peers: of the groups with a reward spread in its
   updates (the only groups that change the policy: grpo.py), how many were peers' (the figure of the
   peers tab and of `swarm experiment`'s table), and how many peers' groups it received;
3. its held-out accuracy, and on a line of its own a solo run of the same model (`SoloCurveFound`) at the same
   engine CPU with the difference in held-out points and its 95% interval (kernel/benefit.py), or why there is
   no comparison; while no peer is connected it says the node is alone and compares nothing;
4. once the node sends its participant record (`RecordUpdated`, kernel/record.py): what it gave, whose
   groups it used most, its held-out gain since the first evaluation and its rollbacks (`swarm stats`
   prints the whole record).
A node that trains with `--external 0` shares but learns only from its own groups: the panel says so,
and how to learn from peers too. Pure text from a `ViewState`, like the other dashboard widgets.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from swarm_app.kernel.benefit import NoComparison, points
from swarm_app.tui.state import MOVING_AVERAGE, ViewState, benefit

BARS = "▁▂▃▄▅▆▇█"
NO_VALUE = "·"
"""A round without a value (no peers' group trained on): a gap in the sparkline."""
POINTS = 100.0
TRY_EXTERNAL = 4
"""The J the panel suggests to a node that trains alone: the demo's, half of the default I = 8 (the
paper's best split of 8 groups was 4/4)."""


def sparkline(values: list[float | None]) -> str:
    """One character a value on a fixed 0..1 scale (rewards and accuracies), so two lines compare."""
    top = len(BARS) - 1
    return "".join(NO_VALUE if v is None else BARS[round(min(max(v, 0.0), 1.0) * top)] for v in values)


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _number(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def reward_line(s: ViewState, window: int = MOVING_AVERAGE) -> Text:
    c = s.curves
    rounds = c.rounds[-window:]
    external = dict(zip(c.external_rounds, c.external))
    own = c.local[-window:]
    peers = [external.get(t) for t in rounds]
    peers_line = f" {sparkline(peers)}" if any(v is not None for v in peers) else ""
    return Text.assemble((f"reward (last {window} rounds)", "dim"), "  own ", (_number(_mean(own)), "bold"),
                         f" {sparkline(own)}  from peers ", (_number(_mean(peers)), "bold"), peers_line)


def learns_from_peers(s: ViewState) -> bool:
    """False only when the node said it takes no peers' groups (J = 0); an older node does not say."""
    return s.external != 0


def signal_line(s: ViewState) -> Text:
    if s.offline:
        return Text("offline (--offline): nothing shared, nothing received, nothing learned from peers")
    if not learns_from_peers(s):
        return Text("this node shares its groups but learns only from its own (--external 0)")
    received = s.swarm_totals.accepted if s.swarm_totals else 0
    if not s.signal_groups:
        return Text(f"signal from peers: no group with a reward spread yet · received {received}")
    return Text.assemble(("signal from peers ", "dim"), (f"{s.peer_signal_share:.0%}", "bold"),
                         f": {s.external_groups} of {s.signal_groups} groups with a reward spread · received {received}")


def heldout_line(s: ViewState) -> Text:
    if not learns_from_peers(s) and not s.offline:
        return Text(f"to learn from peers too: swarm run --external {TRY_EXTERNAL} (J: peers' groups per round)",
                    style="dim")
    c = s.curves
    if not c.heldout:
        own = Text("held-out: no evaluation yet (e: now)")
    else:
        own = Text.assemble(("held-out ", "dim"), (f"{c.heldout[-1]:.2f}", "bold"), f" at round {c.heldout_rounds[-1]}")
    if s.offline:
        return own
    if not s.connected_peers:
        return own + Text(" · alone: no peer connected, so nothing to say about sharing", style="dim")
    if s.solo is None:
        return own + Text(" · no solo run to compare with: run swarm experiment", style="dim")
    at = c.heldout_rounds[-1] if c.heldout else None
    if at is not None and at in c.cpu and c.heldout_n[-1]:
        own += Text(f" on {c.heldout_n[-1]} items, after {c.cpu[at]:,.0f} engine CPU s")
    return own


def solo_line(s: ViewState) -> Text | None:
    """The solo curve at this node's engine CPU, the difference in points with its 95% interval, and the curve's
    source; or why there is no comparison (kernel/benefit.py). None where `heldout_line` says why there is no
    solo line at all (offline, J = 0, alone, no solo curve)."""
    if s.offline or not learns_from_peers(s) or not s.connected_peers or s.solo is None:
        return None
    found = benefit(s)
    source = Text.assemble(" · ", (s.solo.source, "dim"))
    if found is None:
        return Text("solo at equal engine CPU: after the first evaluation", style="dim") + source
    if isinstance(found, NoComparison):
        return Text(f"solo: {found.reason}", style="dim") + source
    low, high = found.interval
    return Text.assemble(("solo at equal CPU ", "dim"), (f"{found.solo:.2f}", "bold"), f" on {found.solo_n} items: ",
                         (f"{points(found.difference)} points", "bold"), f", 95% {points(low)} to {points(high)}") + source


def record_line(s: ViewState) -> Text:
    """gave, used from how many peers, held-out gain since the first evaluation, rollbacks, then (cut first on a
    narrow terminal) the peer whose groups it used most."""
    r = s.record
    parts = [f"gave {r.shared:,}" if r.online_rounds else "gave nothing (offline)",
             f"used {r.groups_used:,} from {r.peers_used} peer{'s' if r.peers_used != 1 else ''}"]
    if r.gain is not None:
        parts.append(f"held-out {r.gain * POINTS:+.1f} pts")
    if r.rollbacks:
        parts.append(f"{r.rollbacks} rollback{'s' if r.rollbacks != 1 else ''}")
    most = next(iter(r.top_peers.items()), None)
    if most is not None:
        parts.append(f"most from {most[0][:8]} ({most[1]:,})")
    return Text.assemble(("record ", "dim"), " · ".join(parts))


class SharingPanel(Static):
    """See the module docstring; its border title names it."""

    def on_mount(self) -> None:
        self.border_title = "Sharing: what peers did for this node"

    def show(self, s: ViewState) -> None:
        solo = solo_line(s)
        lines = [reward_line(s), signal_line(s), heldout_line(s), *([solo] if solo else []),
                 *([record_line(s)] if s.record else [])]
        self.styles.height = len(lines) + 1  # the border line
        self.update(Text("\n").join(lines))
