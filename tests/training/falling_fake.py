"""Test-only engine: the fake engine, except that its greedy (held-out) answers are right until it has run
`FALL_AFTER` rounds (sampled generations), and then a `WRONG_SHARE` of them (chosen by a hash of the
prompt) turn wrong. A checkpoint keeps that count, so loading an earlier one brings the right answers back."""

from __future__ import annotations

import hashlib
import json

from backends.base import Completion
from backends.fake import FakeBackend
from swarm_app.kernel import tasks


class FallingBackend(FakeBackend):
    FALL_AFTER = 3
    WRONG_SHARE = 1.0
    answers: dict[str, str] = {}
    """Prompt (as JSON) -> the right answer, for the held-out items of the preset."""

    @classmethod
    def learn_heldout(cls, preset: str, n: int) -> None:
        items = [tasks.regenerate(ref, heldout=True) for ref in tasks.heldout(tasks.preset(preset), n)]
        cls.answers = {json.dumps(task.messages(), sort_keys=True): task.answer for task in items}

    def __init__(self) -> None:
        super().__init__()
        self.rounds = 0

    def generate(self, prompts, n, sampling, progress=None):
        self.rounds += sampling.temperature != 0
        return super().generate(prompts, n, sampling, progress)

    def save_adapter(self, folder) -> None:
        super().save_adapter(folder)
        (folder / "rounds.json").write_text(json.dumps(self.rounds))

    def load_adapter(self, folder) -> None:
        super().load_adapter(folder)
        self.rounds = json.loads((folder / "rounds.json").read_text())

    def _complete(self, prompt, index, sampling):
        key = json.dumps(prompt, sort_keys=True)
        if sampling.temperature != 0 or key not in self.answers:
            return super()._complete(prompt, index, sampling)
        share = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") / 2**32
        wrong = self.rounds >= self.FALL_AFTER and share < self.WRONG_SHARE
        text = "<answer>no idea</answer>" if wrong else f"<answer>{self.answers[key]}</answer>"
        return Completion(text, len(text.split()))
