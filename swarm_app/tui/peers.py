"""The peers view: swarm totals, how much of the learning signal came from peers, a sortable table."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from swarm_app.tui.state import ViewState

COLUMNS = ("peer", "address", "link", "reachable", "rtt", "recv", "accepted", "rejected (why)", "used", "seen")


class PeersView(Vertical):
    sort_column: int = 0

    def compose(self) -> ComposeResult:
        yield Static(id="swarm-totals")
        table = DataTable(id="peers-table", zebra_stripes=True, cursor_type="row")
        table.add_columns(*COLUMNS)
        yield table

    def show(self, s: ViewState, now: float | None = None) -> None:
        t = s.swarm_totals
        share = s.peer_signal_share
        signal = (f"{share:.0%} of the groups with a learning signal in your updates came from peers"
                  if share is not None else "no update with a learning signal yet")
        totals = (f"peers {sum(p.connected for p in s.peers)} connected, {len(s.peers)} known · sent {t.sent} · "
                  f"received {t.accepted} · rejected {t.rejected} · pool {t.pool}" if t else "not connected to a swarm")
        self.query_one("#swarm-totals", Static).update(Text(f"{totals}\n{signal}"))
        table = self.query_one(DataTable)
        table.clear()
        rows = sorted(s.peers, key=lambda r: _sort_key(r, self.sort_column))
        for r in rows:
            seen = "-" if not r.last_seen else (f"{max(now - r.last_seen, 0):.0f} s ago" if now else "")
            table.add_row(Text(r.node_id[:12]), Text(r.address or "-"), "up" if r.connected else "-",
                          "yes" if r.reachable else "no",
                          f"{r.latency_ms:.0f} ms" if r.latency_ms is not None else "-", str(r.received),
                          str(r.accepted), Text(f"{r.rejected} ({r.main_rejection})" if r.rejected else "0"),
                          str(r.used), seen)

    @on(DataTable.HeaderSelected)
    def sort_by(self, event: DataTable.HeaderSelected) -> None:
        self.sort_column = event.column_index
        self.app.refresh_peers()


def _sort_key(r, column: int):
    keys = (r.node_id, r.address, not r.connected, not r.reachable, r.latency_ms if r.latency_ms is not None else 1e9,
            -r.received, -r.accepted, -r.rejected, -r.used, -r.last_seen)
    return keys[column]
