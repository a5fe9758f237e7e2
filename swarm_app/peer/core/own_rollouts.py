"""This node's own rollouts on their way out: never a held-out item, a sequence number never reused, and the
same checks peers apply (one they would refuse is not sent, and is logged: a bug here, not there).

`OwnRollouts.sign` signs and files one rollout in this node's pool; which neighbours it is pushed to is the
core's. Sans-IO: the time is an argument.
"""

from __future__ import annotations

import logging
from typing import Callable

from swarm_app.kernel.rollouts import Rollout
from swarm_app.kernel.tasks import HELDOUT_SEED
from swarm_app.peer.core.admission import Admission
from swarm_app.peer.core.identity import Identity
from swarm_app.peer.core.wire import SignedRollout, WireError, parse_body, sign_rollout

log = logging.getLogger(__name__)


class OwnRollouts:
    def __init__(self, identity: Identity, admission: Admission, count: Callable[[str], None]) -> None:
        """`count`: the core's tally (tally.py) of published, heldout_dropped and own_rejected."""
        self.identity, self.admission, self.count = identity, admission, count
        self._seq = 0
        self._heldout_dropped = 0

    def sign(self, rollout: Rollout, now: float) -> SignedRollout | None:
        """Sign `rollout` and file it in the pool; None when it must not leave this node."""
        if rollout.ref.seed >= HELDOUT_SEED:  # a bug upstream: held-out items must never leave this node
            self.count("heldout_dropped")
            self._heldout_dropped += 1
            (log.warning if self._heldout_dropped == 1 else log.debug)(
                "own rollout for held-out item %s #%d not shared: seed %d is reserved for evaluation",
                rollout.ref.dataset, rollout.ref.index, rollout.ref.seed)
            return None
        now_ms = int(now * 1000)
        self._seq = max(self._seq + 1, now_ms * 1000)  # clock-derived: a restart never reuses a number
        try:
            signed = sign_rollout(self.identity, rollout, self._seq, now_ms)
        except WireError as exc:
            log.warning("own rollout not shared: %s (limit: 64 KiB per group)", exc)
            self.count("own_rejected")
            return None
        self.admission.admit_own(parse_body(signed.body), signed)
        self.count("published")
        return signed
