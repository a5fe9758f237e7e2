"""Prometheus metrics of one peer node, in a registry of its own (tests run many nodes per process).

A custom collector reads the core's counters and the connection gate at scrape time, so the hot paths
keep plain integers and nothing here can drift from what `PeerNode.stats()` shows. Every counter the
core keeps is exported (one without a description here still gets a generic one). Labels are reasons
and directions, never peer ids (unbounded cardinality). This module does not serve HTTP (server.py does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from swarm_app.net.gate import ConnectionGate
    from swarm_app.peer.core.protocol import NodeCore

COUNTERS = {
    "published": "Own rollouts signed and shared",
    "pushes": "Push messages sent",
    "pulls": "Pull requests sent over websockets",
    "http_pulls": "HTTP fallback pulls sent",
    "pulls_served": "Pull requests answered",
    "accepted": "Peer rollouts admitted to the pool",
    "bans": "Peers disconnected and banned for repeated rejections",
    "send_dropped": "Outgoing messages dropped because a peer's send queue was full",
    "dial_failures": "Outbound connection attempts that failed",
    "late_samples": "Pull answers that came after pull_timeout_s (taken, not punished)",
    "heldout_dropped": "Own rollouts for held-out items that were not shared",
    "http_malformed": "HTTP requests refused as malformed (400 or a close)",
    "http_samples_served": "HTTP fallback pulls (GET /sample) answered",
    "pull_timeouts": "Pull requests that got no answer within pull_timeout_s",
    "unshared": "Own rollouts kept because sharing is off",
    "own_rejected": "Own rollouts that failed this node's own admission checks (not shared)",
    "inbound_evicted": "Idle inbound peers closed to make room for a newcomer",
    "records_received": "Signed node records from peer lists that passed every check",
    "records_signed": "Own node records signed (on reaching a new address, and at half of each one's life)",
    "rollouts_served": "Rollouts handed to peers in pull answers, own and relayed (websocket and HTTP)",
    "ws_bytes_in": "Bytes of websocket messages received on established links (UTF-8 text, no framing)",
    "ws_bytes_out": "Bytes of websocket messages sent on established links (UTF-8 text, no framing)",
}


class NodeCollector:
    def __init__(self, core: "NodeCore", gate: "ConnectionGate") -> None:
        self.core, self.gate = core, gate

    def collect(self) -> Iterator[Metric]:
        figures = self.core.view.figures()
        for name in [*COUNTERS, *sorted(set(figures.events) - set(COUNTERS))]:
            family = CounterMetricFamily(f"rsp_{name}", COUNTERS.get(name, f"Node core counter {name}"))
            family.add_metric([], figures.events.get(name, 0))
            yield family
        rejected = CounterMetricFamily("rsp_rejected", "Rollouts and messages rejected, by reason", labels=["reason"])
        for reason, count in sorted(figures.rejected.items()):
            rejected.add_metric([reason], count)
        yield rejected
        records = CounterMetricFamily("rsp_records_rejected", "Node records in peer lists refused, by reason",
                                      labels=["reason"])
        for reason, count in sorted(figures.records_rejected.items()):
            records.add_metric([reason], count)
        yield records
        neighbours = GaugeMetricFamily("rsp_neighbours", "Open peer connections", labels=["direction"])
        for direction in ("in", "out"):
            neighbours.add_metric([direction], figures.inbound if direction == "in" else figures.outbound)
        yield neighbours
        yield GaugeMetricFamily("rsp_pool_rollouts", "Rollouts in the pool", value=figures.pool_rollouts)
        yield GaugeMetricFamily("rsp_pool_bytes", "Body bytes in the pool", value=figures.pool_bytes)
        yield GaugeMetricFamily("rsp_seen_entries", "Entries in the seen-cache", value=figures.seen_entries)
        yield GaugeMetricFamily("rsp_known_addresses", "Addresses in the address book", value=figures.known_addresses)
        gate = self.gate
        yield GaugeMetricFamily("rsp_server_connections", "Open TCP connections to the servers", value=gate.open)
        refused = CounterMetricFamily("rsp_connections_refused", "TCP connections closed unread, by cap", labels=["cap"])
        for cap in ("per_ip", "total"):
            refused.add_metric([cap], gate.refused[cap])
        yield refused


class NodeMetrics:
    def __init__(self, core: "NodeCore", gate: "ConnectionGate", collectors: tuple = ()) -> None:
        """`collectors`: other sources of figures on the same /metrics (the session's training figures)."""
        self.registry = CollectorRegistry(auto_describe=False)
        for collector in (NodeCollector(core, gate), *collectors):
            self.registry.register(collector)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
