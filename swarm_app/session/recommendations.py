"""A model folder's recommended settings: `swarm.toml` beside its config.json, applied only to that model.

The app's defaults are written for real models (Qwen2.5-0.5B and up). A model that needs other values,
such as the bundled swarm-tiny (rounds of about a second, where a held-out evaluation every 5 rounds took
21-38% of the round time), carries them in its own folder; a folder without the file changes nothing.
The file is TOML with the sections of config.toml. Its values sit just above the built-in defaults:
a key that a command's default, config.toml, SWARM_* or a flag set (`Settings.given`) keeps its value,
and so does a key that code set to something other than its default. Only settings about the model
and its training may be recommended: never where it runs, for how long or with what seed.
This module reads one small file and imports nothing heavy; it never writes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.settings import Settings, coerce, default_of, field_of, read_config

log = logging.getLogger(__name__)

FILE_NAME = "swarm.toml"
SECTIONS = ("model", "lora", "train")
"""The sections a model may recommend values in."""
NOT_RECOMMENDABLE = frozenset({"model.path", "model.backend", "model.threads", "train.rounds", "train.seed"})
"""The user's choices of engine, threads, run length and seed: a model folder has no say in them."""


def read_recommendations(folder: Path) -> dict[str, Any]:
    """The folder's recommended values by "section.field" ({} without a swarm.toml). Raises UsageError
    naming the file for a section or key a model may not set."""
    path = folder / FILE_NAME
    if not path.is_file():
        return {}
    found: dict[str, Any] = {}
    for section, values in read_config(path).items():
        if section not in SECTIONS or not isinstance(values, dict):
            raise UsageError(f"{path}: [{section}] cannot be recommended by a model; allowed: {', '.join(SECTIONS)}")
        for name, value in values.items():
            key = f"{section}.{name}"
            if key in NOT_RECOMMENDABLE:
                raise UsageError(f"{path}: {key} is the user's to choose, not the model's; remove it from the file")
            found[key] = value
    return found


def apply_recommendations(settings: Settings, folder: Path) -> dict[str, Any]:
    """Set each recommended value that no layer above set, in place; returns the values applied.
    Every value is checked, also one a layer above replaces: a bad file fails the same way always."""
    source = str(folder / FILE_NAME)
    applied: dict[str, Any] = {}
    for key, raw in read_recommendations(folder).items():
        section, name = key.split(".")
        try:
            spec = field_of(key)
        except KeyError:
            raise UsageError(f"{source}: unknown setting {key}; remove it from the file") from None
        value = coerce(spec, key, raw, source)
        if key in settings.given or getattr(getattr(settings, section), name) != default_of(spec):
            continue
        setattr(getattr(settings, section), name, value)
        applied[key] = value
    if applied:
        log.info("the model's recommended settings (%s): %s; config.toml, SWARM_* or a flag overrides them",
                 source, ", ".join(f"{k} = {v!r}" for k, v in applied.items()))
    return applied
