"""What a simulated run measures, as it runs: an `Observer` of the network plus a periodic sampler.

Definitions (the figures of issue #28):
- author coverage of a node over a window [t0, t1]: of the honest authors that published at least once
  in [t0, t1 - 120 s] (a rollout published in the last two minutes has had no time to travel), other
  than the node itself, the share with at least one rollout this node admitted during the window.
  Receivers: honest nodes online for the whole window.
- rollouts received per minute: items in push and sample messages that reached the node, admitted or
  not (duplicates count: that is the node's cost).
- age at receipt: receive time minus the rollout's timestamp, for every rollout an honest node admitted.
- outbound links below the low water mark: the longest stretch, from its join on, any honest node
  spent with fewer than 6 open outbound links (sampled every `sample_s`).
- links below the low water mark: the same, counting inbound links too (what the DHT's `hungry_below`
  counts; a reachable node's inbound links are most of its links).
- time to `low_water` links: from a node's join to the first sample with 6 open outbound links (the
  cold start of a swarm found only on the DHT: `link_figures` in report.py).
- ... and the same for stretches that began after `warm_s` (a node joining a swarm that already
  formed, or losing links in one), apart from the cold start of the whole swarm in its first minutes.
- eclipse: the share of hostile nodes among an honest node's outbound neighbours, and among the entries
  of the peer table it would save (`AddressBook.to_json`), the largest over nodes and samples after
  the first `warmup_s`, and at the end. Bootstrap nodes apart: every node dials them first, so they
  hold most of a small swarm inbound and have few outbound links to judge by.
"""

from __future__ import annotations

import statistics
from array import array
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from benchmarks.swarm.network import START, Network, Observer, SimNode
from swarm_app.peer.core.actions import Admitted

FRESH_S = 120.0


@dataclass
class Window:
    name: str
    start: float
    end: float
    heard: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    """Receiver index -> authors it admitted a rollout of during the window."""


class Recorder(Observer):
    def __init__(self, network: Network, windows: list[Window], main: Window, sample_s: float = 2.0,
                 warmup_s: float = 120.0, low_water: int = 6, warm_s: float = 180.0, bootstraps: int = 0) -> None:
        self.network, self.windows, self.main = network, windows, main
        self.sample_s, self.warmup_s, self.low_water, self.warm_s = sample_s, warmup_s, low_water, warm_s
        self.bootstraps = bootstraps
        self.published: dict[str, list[float]] = defaultdict(list)
        self.ages = array("f")
        self.received: Counter[tuple[int, int]] = Counter()
        """(node, minute) -> rollouts received."""
        self.pushed: Counter[tuple[int, int]] = Counter()
        """(node, minute) -> rollouts pushed to it (part of `received`)."""
        self.bytes: Counter[tuple[int, int]] = Counter()
        """(node, minute) -> bytes sent and received."""
        self.leaf_bytes_by_message: Counter[str] = Counter()
        """"sent pull", "received sample", ...: bytes of honest nodes behind NAT in the main window."""
        self.max_inbound: Counter[int] = Counter()
        self.low_since: dict[int, float] = {}
        self.longest_low: Counter[int] = Counter()
        self.longest_low_warm: Counter[int] = Counter()
        self._reached: set[int] = set()
        """Nodes seen with at least `low_water` outbound links once."""
        self.low_since_all: dict[int, float] = {}
        self.longest_low_all: Counter[int] = Counter()
        """As `longest_low`, counting inbound links too."""
        self._reached_all: set[int] = set()
        self.time_to_low_water: dict[int, float] = {}
        """Node index -> seconds from its join to the first sample with `low_water` outbound links."""
        self.time_to_honest: dict[int, float] = {}
        """Node index -> seconds from its join to the first sample with `low_water` links (in and out) to honest
        nodes (in a run with hostile nodes; otherwise every link is honest)."""
        self.outbound_series: list[tuple[float, int, float, int]] = []
        """(minute, min, median, max) of honest nodes' outbound links."""
        self.hostile_outbound_max = 0.0
        self.hostile_saved_max = 0.0
        self.hostile_outbound_end = 0.0
        self.hostile_accepted = 0
        self.dials_to_unreachable = 0
        self.advertised_unreachable = 0
        """Entries naming a node behind NAT in the peer lists honest nodes answered with."""
        self._nat: set[str] = set()
        self._nat_counted = -1
        network.observer = self
        network.schedule(sample_s, self._sample)

    # --- hooks

    def published_by(self, node: SimNode) -> None:
        self.published[node.core.node_id].append(self.network.now)

    def admitted(self, node: SimNode, action: Admitted, now: float) -> None:
        if node.role != "honest":
            return
        hostile = self.network.hostile
        if hostile is not None and hostile.is_crafted(action.entry.signed):
            self.hostile_accepted += 1
        author = action.entry.author
        for window in self.windows:
            if window.start <= now <= window.end:
                window.heard[node.index].add(author)
        if self.main.start <= now <= self.main.end:
            self.ages.append(now - action.entry.ts_ms / 1000)

    def frame(self, sender: SimNode, receiver: SimNode, message: dict[str, Any], size: int) -> None:
        minute = int((self.network.now - START) // 60)
        self.bytes[sender.index, minute] += size
        self.bytes[receiver.index, minute] += size
        if self.main.start <= self.network.now <= self.main.end:
            for node, way in ((sender, "sent"), (receiver, "received")):
                if node.role == "honest" and not node.reachable:
                    self.leaf_bytes_by_message[f"{way} {message.get('t')}"] += size
        if message.get("t") in ("push", "sample"):
            self.received[receiver.index, minute] += len(message["items"])
            if message["t"] == "push":
                self.pushed[receiver.index, minute] += len(message["items"])

    def dialing(self, node: SimNode, target: SimNode | None) -> None:
        if node.role == "honest" and target is not None and not target.reachable:
            self.dials_to_unreachable += 1

    def listed(self, node: SimNode, entries: list[dict[str, Any]]) -> None:
        if node.role == "honest":
            self.advertised_unreachable += sum(e.get("addr") in self._behind_nat() for e in entries)

    def _behind_nat(self) -> set[str]:
        nodes = self.network.nodes
        if len(nodes) != self._nat_counted:
            self._nat, self._nat_counted = {n.addr for n in nodes if not n.reachable}, len(nodes)
        return self._nat

    def connected(self, client: SimNode, server: SimNode, now: float) -> None:
        inbound = sum(c.direction == "in" for c in server.core.links.conns.values())
        self.max_inbound[server.index] = max(self.max_inbound[server.index], inbound)

    # --- the sampler

    def _sample(self) -> None:
        now = self.network.now
        honest = [n for n in self.network.nodes if n.online and n.role == "honest"]
        counts = []
        honest_ids = {n.core.node_id for n in honest} if self.network.hostile is not None else None
        for node in honest:
            out = sum(c.direction == "out" for c in node.core.links.conns.values())
            counts.append(out)
            self._track_low(node, out, now)
            self._track_low_all(node, len(node.core.links.conns), now)
            if node.index not in self.time_to_honest and self._honest_links(node, honest_ids) >= self.low_water:
                self.time_to_honest[node.index] = now - node.joined
        if counts and int((now - START) / self.sample_s) % 5 == 0:
            self.outbound_series.append(((now - START) / 60, min(counts), statistics.median(counts), max(counts)))
        if self.network.hostile is not None and now - START >= self.warmup_s:
            self._sample_eclipse(honest, now)
        self.network.schedule(self.sample_s, self._sample)

    def _honest_links(self, node: SimNode, honest_ids: set[str] | None) -> int:
        """Links to honest nodes (`honest_ids`; None: every node is honest)."""
        if honest_ids is None:
            return len(node.core.links.conns)
        return sum(c.peer in honest_ids for c in node.core.links.conns.values())

    def _track_low(self, node: SimNode, out: int, now: float) -> None:
        if out < self.low_water:  # below since it joined, or since this sample
            self.low_since.setdefault(node.index, now if node.index in self._reached else node.joined)
            return
        if node.index not in self._reached:
            self._reached.add(node.index)
            self.time_to_low_water[node.index] = now - node.joined
        if node.index in self.low_since:
            self._close_low(node.index, self.low_since.pop(node.index), now)

    def _track_low_all(self, node: SimNode, links: int, now: float) -> None:
        if links < self.low_water:
            self.low_since_all.setdefault(node.index, now if node.index in self._reached_all else node.joined)
            return
        self._reached_all.add(node.index)
        if node.index in self.low_since_all:
            since = self.low_since_all.pop(node.index)
            self.longest_low_all[node.index] = max(self.longest_low_all[node.index], now - since)

    def _close_low(self, index: int, since: float, end: float) -> None:
        self.longest_low[index] = max(self.longest_low[index], end - since)
        if since - START >= self.warm_s:
            self.longest_low_warm[index] = max(self.longest_low_warm[index], end - since)

    def _sample_eclipse(self, honest: list[SimNode], now: float) -> None:
        hostile = {n.addr for n in self.network.nodes if n.role != "honest"}
        tick = int((now - START) / self.sample_s)
        for node in honest:
            out = [c.addr for c in node.core.links.conns.values() if c.direction == "out"]
            if node.index < self.bootstraps:
                continue
            if out:
                share = sum(a in hostile for a in out) / len(out)
                self.hostile_outbound_max = max(self.hostile_outbound_max, share)
            if tick % 15 == 0:
                saved = [e["addr"] for e in node.core.addresses.to_json()]
                if saved:
                    self.hostile_saved_max = max(self.hostile_saved_max, sum(a in hostile for a in saved) / len(saved))

    def finish(self) -> None:
        """Close the stretches still open and take the end-of-run eclipse figure."""
        now = self.network.now
        for index, since in self.low_since.items():
            self._close_low(index, since, self.network.nodes[index].left or now)  # one that left: until then
        self.low_since.clear()
        for index, since in self.low_since_all.items():
            end = self.network.nodes[index].left or now
            self.longest_low_all[index] = max(self.longest_low_all[index], end - since)
        self.low_since_all.clear()
        hostile = {n.addr for n in self.network.nodes if n.role != "honest"}
        for node in self.network.nodes:
            out = [c.addr for c in node.core.links.conns.values() if c.direction == "out"]
            if node.online and node.role == "honest" and node.index >= self.bootstraps and out:
                self.hostile_outbound_end = max(self.hostile_outbound_end, sum(a in hostile for a in out) / len(out))

    # --- figures

    def coverage(self, window: Window, receivers: list[SimNode], authors: set[str]) -> list[float]:
        """Each receiver's author coverage over `window` (see the module docstring)."""
        shares = []
        for node in receivers:
            others = authors - {node.core.node_id}
            if others:
                shares.append(len(window.heard.get(node.index, set()) & others) / len(others))
        return shares

    def authors(self, nodes: list[SimNode], start: float, end: float) -> set[str]:
        """Node ids of `nodes` that published at least once in [start, end]."""
        ids = {n.core.node_id for n in nodes}
        return {a for a in ids if any(start <= t <= end for t in self.published.get(a, ()))}

    def per_minute(self, table: Counter, node: SimNode, start: float, end: float) -> float:
        """The node's mean per minute of `table` over the whole minutes in [start, end]."""
        first, last = int((start - START) // 60), int((end - START) // 60)
        minutes = range(first, last)
        return sum(table[node.index, m] for m in minutes) / max(1, len(minutes))

    def peak_minute(self, table: Counter, node: SimNode, start: float, end: float) -> int:
        first, last = int((start - START) // 60), int((end - START) // 60)
        return max((table[node.index, m] for m in range(first, last)), default=0)


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank), None when there is nothing to measure."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def live_through(nodes: list[SimNode], start: float, end: float) -> list[SimNode]:
    """Honest nodes online for all of [start, end]."""
    return [n for n in nodes if n.role == "honest" and n.joined <= start and (n.left is None or n.left >= end)]
