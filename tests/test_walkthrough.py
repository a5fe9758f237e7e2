"""The walk-through of issue 29 (tools/walkthrough.py): the README's commands and the bad inputs a new
user meets, each as a real process in a fresh HOME; it fails on any traceback on screen. Slow: about
10 minutes on 2 cores (the bundled model trains, evaluates, demos and exports). `.ci/run` runs its
trimmed part (`--trimmed`: the quick start and the bad inputs) on every build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_first_hour_without_a_traceback():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "walkthrough.py")], capture_output=True, text=True,
                          timeout=3500)
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " 0 failed" in done.stdout
