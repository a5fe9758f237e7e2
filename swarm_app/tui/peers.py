"""The peers view: swarm totals, how much of the learning signal came from peers, a sortable table."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from swarm_app.tui.state import ViewState

# Fixed widths (longer cells are cut): an auto-width table measures new rows only when its own queue is
# idle, and a repaint in between draws every cell cut at the width of its column's label.
COLUMNS = {"peer": 12, "address": 21, "link": 4, "reachable": 9, "rtt": 6, "recv": 6, "accepted": 8,
           "rejected (why)": 20, "used": 5, "seen": 9}


class PeersView(Vertical):
    sort_column: int = 0

    def compose(self) -> ComposeResult:
        yield Static(id="swarm-totals")
        table = DataTable(id="peers-table", zebra_stripes=True, cursor_type="row")
        for label, width in COLUMNS.items():
            table.add_column(label, width=width)
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
        rows = {r.node_id: _cells(r, now) for r in sorted(s.peers, key=lambda r: _sort_key(r, self.sort_column))}
        if list(rows) != [key.value for key in table.rows]:
            # Peers came, went or changed places: rebuild. Otherwise only the changed cells are written.
            table.clear()
            for node_id, cells in rows.items():
                table.add_row(*cells, key=node_id)
            return
        for node_id, cells in rows.items():
            for column, (old_cell, cell) in zip(table.columns, zip(table.get_row(node_id), cells)):
                if str(old_cell) != str(cell):
                    table.update_cell(node_id, column, cell)

    @on(DataTable.HeaderSelected)
    def sort_by(self, event: DataTable.HeaderSelected) -> None:
        self.sort_column = event.column_index
        self.app.refresh_peers()


def _sort_key(r, column: int):
    keys = (r.node_id, r.address, not r.connected, not r.reachable, r.latency_ms if r.latency_ms is not None else 1e9,
            -r.received, -r.accepted, -r.rejected, -r.used, -r.last_seen)
    return keys[column]


def _cells(r, now: float | None) -> tuple:
    seen = "-" if not r.last_seen else (f"{max(now - r.last_seen, 0):.0f} s ago" if now else "")
    return (Text(r.node_id[:12]), Text(r.address or "-"), "up" if r.connected else "-",
            "yes" if r.reachable else "no",
            f"{r.latency_ms:.0f} ms" if r.latency_ms is not None else "-", str(r.received),
            str(r.accepted), Text(f"{r.rejected} ({r.main_rejection})" if r.rejected else "0"),
            str(r.used), seen)
