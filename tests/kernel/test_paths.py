"""How the app starts itself again as a child process (the TUI's chat, one node per GPU)."""

import sys

from swarm_app.kernel.paths import swarm_command


def test_a_child_is_this_interpreter_running_the_package():
    assert swarm_command() == [sys.executable, "-m", "swarm_app"]


def test_in_the_single_file_binary_a_child_is_the_binary_itself(monkeypatch):
    """PyInstaller sets sys.frozen; its sys.executable is the app, which knows no `-m`."""
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert swarm_command() == [sys.executable]
