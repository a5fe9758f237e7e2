"""Every path the app reads or writes, in one place.

User folders come from platformdirs (config, data, cache); bundled assets are found next to the source
tree, inside a PyInstaller bundle (`sys._MEIPASS`) or under `<prefix>/share/swarm-app`. Nothing writes
next to the code. Tests point all user folders at a temp dir with `SWARM_HOME`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

APP_NAME = "swarm-app"
DEFAULT_MODEL_NAME = "swarm-tiny"


@dataclass(frozen=True)
class UserDirs:
    """The per-user folders (config, data, cache, log). Created on first write, never at import."""

    config: Path
    data: Path
    cache: Path
    log: Path

    @property
    def config_file(self) -> Path:
        return self.config / "config.toml"

    @property
    def runs(self) -> Path:
        return self.data / "runs"

    @property
    def default_run(self) -> Path:
        return self.runs / "default"


def user_dirs() -> UserDirs:
    """platformdirs folders, or `$SWARM_HOME/{config,data,cache}` when that is set (tests, portable use)."""
    home = os.environ.get("SWARM_HOME")
    if home:
        root = Path(home)
        return UserDirs(root / "config", root / "data", root / "cache", root / "log")
    import platformdirs  # deferred: only commands that touch user files need it

    return UserDirs(
        Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)),
        Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)),
        Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)),
        Path(platformdirs.user_log_dir(APP_NAME, appauthor=False)),
    )


def assets_dir() -> Path:
    """The read-only bundled assets folder."""
    frozen_root = getattr(sys, "_MEIPASS", None)
    candidates = [Path(frozen_root) / "assets"] if frozen_root else []
    candidates += [
        Path(__file__).resolve().parents[2] / "assets",
        Path(sys.prefix) / "share" / APP_NAME / "assets",
    ]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[0]


def swarm_command() -> list[str]:
    """How to start `swarm` again as a child process (the TUI's chat, one node per GPU): the single-file binary
    itself when frozen by PyInstaller (its sys.executable is the app and has no `-m`), else this interpreter."""
    return [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "swarm_app"]


def bundled_model_dir(name: str = DEFAULT_MODEL_NAME) -> Path:
    return assets_dir() / "models" / name
