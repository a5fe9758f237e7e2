"""Training figures for Prometheus, next to the peer node's own: read from the last metrics row at
scrape time, so nothing is counted twice and nothing here can drift from metrics.jsonl."""

from __future__ import annotations

from typing import Any, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

GAUGES = {
    "round": "Last completed training round",
    "reward_local": "Mean reward of own completions in the last round",
    "reward_external": "Mean locally re-scored reward of peers' groups used in the last round",
    "n_external": "Peers' rollout groups used in the last round",
    "heldout_acc": "Held-out accuracy at the last evaluation",
    "round_s": "Seconds the last round took",
}


class RoundCollector:
    def __init__(self, last_row: Callable[[], dict[str, Any]]) -> None:
        self.last_row = last_row
        self.last_heldout: float | None = None

    def collect(self) -> Iterator[Metric]:
        row = self.last_row()
        if row.get("heldout_acc") is not None:
            self.last_heldout = row["heldout_acc"]
        values = {**row, "heldout_acc": self.last_heldout}
        for name, doc in GAUGES.items():
            if values.get(name) is not None:
                yield GaugeMetricFamily(f"swarm_train_{name}", doc, value=float(values[name]))
