"""A fake engine slowed down in a subprocess, for tests that must see or interrupt its work."""

from __future__ import annotations

from pathlib import Path

SLOW_FAKE = '''\
"""Test-only (tests/slow_fake.py): the fake engine writes each completion after a delay."""
import time
from backends.fake import FakeBackend
_complete = FakeBackend._complete
def _slow(self, prompt, index, sampling):
    time.sleep({greedy_s} if sampling.temperature == 0 else {sampled_s})
    return _complete(self, prompt, index, sampling)
FakeBackend._complete = _slow
'''


def slow_fake_engine(folder: Path, greedy_s: float = 0.0, sampled_s: float = 0.0) -> dict[str, str]:
    """Environment for a subprocess whose fake engine takes `greedy_s` per greedy answer (evaluations) and
    `sampled_s` per sampled one (rounds): a `sitecustomize` hook in `folder`, so that a test can see or
    interrupt what the fake engine alone would finish in milliseconds."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SLOW_FAKE.format(greedy_s=greedy_s, sampled_s=sampled_s))
    return {"PYTHONPATH": str(folder)}
