"""Hostile simulated nodes: what an attacker who read docs/protocol.md sends, in two modes.

Both modes run a real `NodeCore` (so hellos, pulls and peer lists work as the attacker's would) and
publish nothing valid of their own.
- "attack": every `every_s` each hostile node pushes a mix of crafted items to one neighbour: another
  author's body with altered completions under the original signature (a forgery, and a replay of its
  (author, seq) with other bytes), its own validly signed bodies dated 5 minutes ahead, 20 minutes
  back, or with a wrong answer (ground truth), and every `flood_every_s` a flood of 300 pushes. Every
  crafted id is remembered: `accepted` counts those some honest node admitted (the target is 0).
- "eclipse": hostile nodes are servers that answer every pull with nothing, push nothing, and whose
  /peers answer lists only hostile addresses: the records of 28 hostile nodes at random, each signed by
  its own key (an attacker holds all of them), and 4 forged records naming honest nodes' ids at hostile
  addresses (one signed by the hostile key over the honest key, one whose id is not its key's), which
  honest nodes must refuse: announcements alone, trying to fill honest nodes' books and outbound links.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import rfc8785

from benchmarks.swarm.network import SWARM, Network, SimNode
from benchmarks.swarm.workload import sim_rollout
from swarm_app.peer.core.actions import Action, Send
from swarm_app.peer.core.identity import Identity, b64url
from swarm_app.peer.core.records import MAX_RECORDS, RECORD_LIFETIME_MS, RECORD_PREFIX, NodeRecord, sign_record
from swarm_app.peer.core.wire import SIGNATURE_PREFIX, SignedRollout, body_dict, sign_rollout

MODES = ("attack", "eclipse")
FLOOD = 300
FORGED = 4
"""Forged records in each eclipse answer; the rest of the 32 are hostile nodes' own."""


class Hostile:
    def __init__(self, network: Network, mode: str, rng: random.Random, every_s: float = 5.0,
                 flood_every_s: float = 60.0) -> None:
        if mode not in MODES:
            raise ValueError(f"hostile mode {mode!r}: one of {', '.join(MODES)}")
        self.network, self.mode, self.rng = network, mode, rng
        self.every_s, self.flood_every_s = every_s, flood_every_s
        self.crafted: set[bytes] = set()
        self.accepted = 0
        self.sent = 0
        self._items: dict[int, list[dict[str, str]]] = {}
        self._victims: dict[int, tuple[Identity, float]] = {}
        self._records: dict[int, NodeRecord] = {}
        network.hostile = self

    def start(self, node: SimNode, victim: Identity) -> None:
        """`node` turns hostile from now; `victim` is an honest author whose bodies it forges."""
        if self.mode == "attack":
            self._victims[node.index] = (victim, -1e18)
            self.network.schedule(self.rng.uniform(0, self.every_s), self._attack, node)
            self.network.schedule(self.rng.uniform(0, self.flood_every_s), self._flood, node)

    def is_crafted(self, signed: SignedRollout) -> bool:
        return signed.id in self.crafted

    # --- what hostile nodes send and list

    def outgoing(self, node: SimNode, actions: list[Action]) -> list[Action]:
        if self.mode != "eclipse":
            return actions
        kept: list[Action] = []
        for action in actions:
            if isinstance(action, Send) and action.message.get("t") == "sample":
                kept.append(Send(action.conn, {**action.message, "items": []}))
            elif not (isinstance(action, Send) and action.message.get("t") == "push"):
                kept.append(action)
        return kept

    def peer_list(self, node: SimNode) -> dict[str, list[Any]]:
        if self.mode != "eclipse":
            return node.core.peer_list(self.network.now)
        others = [n for n in self.network.nodes if n.role == "eclipse" and n.online and n is not node]
        chosen = self.rng.sample(others, min(MAX_RECORDS - FORGED, len(others)))
        items = [self._record(n).to_item() for n in chosen] + self._forged(node)
        return {"records": items, "peers": [{"node": n.core.node_id, "addr": n.addr, "verified": True} for n in chosen]}

    def _record(self, node: SimNode) -> NodeRecord:
        """A hostile node's own record, signed with its own key: what any node can make of itself."""
        now_ms, record = int(self.network.now * 1000), self._records.get(node.index)
        if record is None or now_ms >= record.expires_ms - RECORD_LIFETIME_MS // 2:
            record = self._records[node.index] = sign_record(node.core.identity, SWARM, [node.addr], True, now_ms)
        return record

    def _forged(self, node: SimNode) -> list[dict[str, str]]:
        """Records naming honest nodes' ids at `node`'s address; no hostile key can sign them validly."""
        honest = [n for n in self.network.nodes if n.role == "honest"]
        now_ms, own = int(self.network.now * 1000), node.core.identity
        items = []
        for k, victim in enumerate(self.rng.sample(honest, min(FORGED, len(honest)))):
            key = victim.core.identity.public_key if k % 2 == 0 else own.public_key  # else: id is not the key's
            body = rfc8785.dumps({"v": 1, "node": victim.core.node_id, "key": b64url(key), "swarm": SWARM,
                                  "addrs": [node.addr], "reachable": True, "issued_ms": now_ms,
                                  "expires_ms": now_ms + RECORD_LIFETIME_MS})
            items.append({"body": body.decode(), "sig": b64url(own.sign(RECORD_PREFIX + body))})
        return items

    # --- the attack

    def _craft(self, own: Identity, victim: Identity) -> list[dict[str, str]]:
        """Sixteen items dated now, each one a way to be refused; their ids go into `crafted`."""
        now, items = self.network.now, []
        for k in range(4):
            rollout = sim_rollout(self.rng.randrange(1 << 30), k, 0)
            seq, ts_ms = int(now * 1e6) + 10 * k, int(now * 1000)
            genuine = sign_rollout(victim, rollout, seq, ts_ms)
            altered = dataclasses.replace(rollout, completions=rollout.completions[::-1])
            body = rfc8785.dumps(body_dict(altered, victim.public_key, seq, ts_ms))
            items.append(SignedRollout(body, genuine.sig))  # another author's (author, seq), other bytes
            items.append(sign_rollout(own, rollout, seq + 1, int((now + 300) * 1000)))  # 5 min ahead
            items.append(sign_rollout(own, rollout, seq + 2, int((now - 1200) * 1000)))  # 20 min old
            wrong = dataclasses.replace(rollout, answer="-7")
            body = rfc8785.dumps(body_dict(wrong, own.public_key, seq + 3, ts_ms))
            items.append(SignedRollout(body, own.sign(SIGNATURE_PREFIX + body)))  # a wrong ground truth
        self.crafted.update(s.id for s in items)
        return [s.to_item() for s in items]

    def _fresh_items(self, node: SimNode) -> list[dict[str, str]]:
        """The node's crafted items, made anew every 60 s so that their dates stay what they claim."""
        victim, made = self._victims[node.index]
        if self.network.now - made >= 60.0:
            self._items[node.index] = self._craft(node.core.identity, victim)
            self._victims[node.index] = (victim, self.network.now)
        return self._items[node.index]

    def _attack(self, node: SimNode) -> None:
        if not node.online:
            return
        conns = list(node.core.links.conns)
        if conns:
            items = self.rng.sample(self._fresh_items(node), 8)
            self._push(node, self.rng.choice(conns), {"t": "push", "items": items})
        self.network.schedule(self.every_s, self._attack, node)

    def _flood(self, node: SimNode) -> None:
        if not node.online:
            return
        conns = list(node.core.links.conns)
        if conns:
            conn, items = self.rng.choice(conns), self._fresh_items(node)
            for _ in range(FLOOD):
                self._push(node, conn, {"t": "push", "items": [self.rng.choice(items)]})
        self.network.schedule(self.flood_every_s, self._flood, node)

    def _push(self, node: SimNode, conn: int, message: dict[str, Any]) -> None:
        self.sent += len(message["items"])
        self.network.send(node, conn, message)
