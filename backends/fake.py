"""A deterministic stand-in engine, registered like the real ones (tests and `--backend fake` demos).

It answers with a small integer inside <answer> tags, chosen from a hash of the prompt, the sample
index, the seed and how many updates it has had, so runs are reproducible and resumable. It imports
nothing heavy and keeps its whole "adapter" in one JSON file.

At full speed it runs hundreds of rounds a minute, far above any real engine; `SWARM_FAKE_ROUND_S` (seconds,
read when the engine is made) paces it: each generation waits until that long has passed since the previous
one, so a round takes about that long, as on a real node (benchmarks/lan_mesh.py --paced).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from backends.base import (
    Backend,
    BackendError,
    Completion,
    Hardware,
    Messages,
    ModelSpec,
    Progress,
    Sampling,
    TrainSample,
    TrainStats,
)

ADAPTER_FILE = "fake_adapter.json"
ROUND_S_ENV = "SWARM_FAKE_ROUND_S"


def round_s_from_env() -> float:
    """The pace asked for in SWARM_FAKE_ROUND_S (0: full speed; a bad value counts as 0)."""
    try:
        return max(0.0, float(os.environ.get(ROUND_S_ENV, "0") or 0))
    except ValueError:
        return 0.0


class FakeBackend(Backend):
    name = "fake"
    adapter_format = "fake-json"

    def __init__(self) -> None:
        self.spec: ModelSpec | None = None
        self.updates = 0
        self.tokens_seen = 0
        self.round_s = round_s_from_env()
        self._last_generate = time.monotonic()

    @classmethod
    def is_available(cls, hw: Hardware) -> tuple[bool, str]:
        return True, "the fake engine runs anywhere (no model is loaded)"

    def load(self, spec: ModelSpec) -> None:
        self.spec = spec

    @property
    def model_id(self) -> str:
        return "fake"

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling,
                 progress: Progress | None = None) -> list[list[Completion]]:
        self._pace()
        out = []
        for done, prompt in enumerate(prompts, 1):
            out.append([self._complete(prompt, i, sampling) for i in range(n)])
            if progress is not None:
                progress(done, len(prompts))
        return out

    def _pace(self) -> None:
        """Wait until `round_s` has passed since the previous generation (a round generates once, a round
        short of groups with a reward spread twice)."""
        wait = self._last_generate + self.round_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self._last_generate = time.monotonic()

    def _complete(self, prompt: Messages, index: int, sampling: Sampling) -> Completion:
        sample = 0 if sampling.temperature == 0 else index
        key = f"{json.dumps(prompt, sort_keys=True)}|{sample}|{sampling.seed}|{self.updates}"
        value = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % 10
        text = f"I think it is {value}. <answer>{value}</answer>"
        return Completion(text, len(text.split()))

    def train_step(self, batch: list[TrainSample], progress: Progress | None = None) -> TrainStats:
        self.updates += 1
        if progress is not None:
            progress(1, 1)
        tokens = sum(len(s.completion.split()) for s in batch)
        self.tokens_seen += tokens
        loss = -sum(s.advantage for s in batch) / max(len(batch), 1)
        return TrainStats(loss=loss, tokens=tokens, steps=1)

    def save_adapter(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        state = {"updates": self.updates, "tokens_seen": self.tokens_seen}
        (folder / ADAPTER_FILE).write_text(json.dumps(state), encoding="utf-8")

    def load_adapter(self, folder: Path) -> None:
        try:
            state = json.loads((folder / ADAPTER_FILE).read_text(encoding="utf-8"))
            self.updates, self.tokens_seen = int(state["updates"]), int(state["tokens_seen"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BackendError(f"{folder} is not a fake adapter ({exc})") from None
