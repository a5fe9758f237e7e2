"""Flags that set a Settings field, declared from the field's own metadata in swarm_app/kernel/settings.py.

A settings flag's dest is its "section.field" key and its default is None ("not given"), so a value
reaches Settings only when it was typed, and every command layers the same way: flag >
SWARM_<SECTION>_<FIELD> > config.toml > the command's own default (`swarm demo`: 10 rounds) > the
field's default. Values stay strings here: Settings converts and checks them, so a bad value is the
same one-line error (exit 2) whether it came from a flag, the environment or config.toml. A field the
bundled model's swarm.toml sets says so in its help ("Default: 8 (32 with the bundled model ...)"):
the help names the value a run uses, not only the field's default.
Must stay cheap to import (argparse and settings): `swarm --version` builds every command's parser
(reading one small TOML file, once, is part of that).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
from pathlib import Path
from typing import Any, Mapping

from swarm_app.kernel.settings import Settings, default_of, field_of, load_settings

MODEL = ("model.path", "model.backend", "model.threads")
TRAIN = ("tasks.preset", "train.rounds", "train.local", "train.external", "train.completions", "train.seed")
PEER = ("peer.swarm", "peer.swarm_key", "peer.bootstrap", "peer.peers", "peer.listen", "peer.mdns", "peer.dht",
        "peer.share", "peer.metrics_listen", "peer.upnp", "peer.enabled")


def add_settings(parser: argparse.ArgumentParser, keys: tuple[str, ...],
                 command_defaults: Mapping[str, Any] | None = None) -> None:
    """--config and one flag per "section.field" key, grouped by section. `command_defaults` are this
    command's own defaults: they apply only where no flag, env variable or config.toml sets the key."""
    command_defaults = dict(command_defaults or {})
    parser.add_argument("--config", metavar="FILE", help="config file (default: config.toml in the user config dir)")
    groups: dict[str, argparse._ArgumentGroup] = {}
    for key in keys:
        section = key.split(".")[0]
        if section not in groups:
            groups[section] = parser.add_argument_group(
                f"{section} settings (also [{section}] in config.toml, SWARM_{section.upper()}_* in the environment)")
        spec = field_of(key)
        groups[section].add_argument(spec.metadata["flag"], dest=key, default=None, **_action(spec),
                                     help=_help(key, spec, command_defaults.get(key)))
    parser.set_defaults(command_defaults=command_defaults)


def _action(spec: dataclasses.Field) -> dict[str, Any]:
    default, meta = default_of(spec), spec.metadata
    if isinstance(default, bool):
        return {"action": "store_const", "const": not default}  # --no-ui, --offline: the opposite of the default
    metavar = meta["metavar"] or "|".join(meta["choices"])
    return {"action": "append" if isinstance(default, list) else "store", "metavar": metavar}


def _help(key: str, spec: dataclasses.Field, command_default: Any) -> str:
    default, meta = default_of(spec), spec.metadata
    text = meta["flag_help"] or meta["doc"]
    if meta["choices"] and meta["metavar"]:
        text += f" One of: {', '.join(meta['choices'])}."
    if isinstance(default, list):
        text += " Repeatable."
    if command_default is not None:
        env = f"SWARM_{key.replace('.', '_').upper()}"
        text += f" Default here: {command_default}, unless {env} or config.toml sets it."
    elif not isinstance(default, (bool, list)) and default != "":
        text += f" Default: {default}."
    bundled = bundled_recommendations().get(key)
    if bundled is not None and bundled != default:
        text += f" ({bundled} with the bundled model: its swarm.toml recommends it; flags, SWARM_* and config.toml win.)"
    return f"{text} [{key}]".replace("%", "%%")


@functools.cache
def bundled_recommendations() -> dict[str, Any]:
    """The bundled model's swarm.toml values ({} where the model or the file is missing or unreadable:
    the help must never fail)."""
    from swarm_app.kernel.errors import SwarmError
    from swarm_app.kernel.paths import bundled_model_dir
    from swarm_app.session.recommendations import read_recommendations

    try:
        return read_recommendations(bundled_model_dir())
    except (SwarmError, OSError):
        return {}


def load_settings_for(args: argparse.Namespace) -> Settings:
    """The command's Settings: the flags typed, over SWARM_* env, config.toml and the command's defaults."""
    from swarm_app.kernel.paths import user_dirs

    typed = {key: value for key, value in vars(args).items() if "." in key}  # only settings flags have dotted dests
    config = Path(args.config) if args.config else user_dirs().config_file
    return load_settings(config, os.environ, typed, config_required=bool(args.config),
                         command_defaults=args.command_defaults)
