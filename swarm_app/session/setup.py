"""Setting a run up: everything the session checks and derives before the model loads.

Pure functions of the settings and the run folder (no session state): the peer config and its usable
listen address, the model spec, the run's seed, whether an existing run matches, the run file, and
the loading of a checkpoint's adapter. Each check raises a SwarmError naming the fix; nothing here
writes except `move_old_run_aside` and `write_run_file`, which the session calls once input is good.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re
import time
from pathlib import Path

from backends import registry
from backends.base import BackendError, Hardware, LoraConfig, ModelSpec, OptimConfig
from swarm_app.kernel import swarms, tasks
from swarm_app.kernel.errors import CheckpointError, SwarmError, UsageError
from swarm_app.kernel.files import write_text_atomic
from swarm_app.kernel.paths import user_dirs
from swarm_app.kernel.runlock import LOCK_FILE
from swarm_app.kernel.settings import PeerSettings, Settings, describe
from swarm_app.training.checkpoint import read_state

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
"""What a run was started with; a resume with another model or preset is refused."""


def peer_config(settings: Settings):
    """The peer node's configuration from the [peer] settings; a bad address or swarm name raises UsageError."""
    from swarm_app.peer.core.config import PeerConfig, check_address

    peer = settings.peer
    if not re.fullmatch(r"[A-Za-z0-9-]{0,32}", peer.identity):
        raise UsageError(f"peer.identity {peer.identity!r}: use up to 32 letters, digits and '-'")
    config = PeerConfig(listen=check_address(peer.listen, "peer.listen"), identity_name=peer.identity,
                        swarm=swarms.swarm_name(peer.swarm, settings.tasks.preset),
                        bootstrap=bootstrap_addresses(settings), mdns=peer.mdns, upnp=peer.upnp, dht=dht_config(settings),
                        metrics_listen=check_address(peer.metrics_listen, "peer.metrics_listen") if peer.metrics_listen else None)
    return config.with_protocol(share=peer.share)


def dht_config(settings: Settings):
    """The DHT part of the peer config ([peer] dht, dht_listen, dht_nodes, dht_routers), None when it is off;
    a bad address raises UsageError naming the setting."""
    from swarm_app.peer.core.config import DhtConfig, check_address, check_dial_address
    from swarm_app.peer.io.dht import STATE_NAME

    peer = settings.peer
    if not peer.dht:
        return None
    return DhtConfig(listen=check_address(peer.dht_listen, "peer.dht_listen") if peer.dht_listen else "",
                     nodes=tuple(check_dial_address(a, "peer.dht_nodes address") for a in peer.dht_nodes),
                     routers=tuple(check_dial_address(a, "peer.dht_routers address") for a in peer.dht_routers),
                     state_path=user_dirs().data / STATE_NAME)


def bootstrap_addresses(settings: Settings) -> tuple[str, ...]:
    """Where the node dials first: `[peer] bootstrap` where any layer set it, else the list shipped for its
    swarm; then `[peer] peers`; each checked (UsageError naming the setting), duplicates dropped."""
    from swarm_app.peer.core.config import check_dial_address

    peer = settings.peer
    swarm = swarms.swarm_name(peer.swarm, settings.tasks.preset)
    given = "peer.bootstrap" in settings.given
    bootstrap = peer.bootstrap if given else swarms.shipped_bootstrap(swarm)
    checked = ([check_dial_address(a, "bootstrap address") for a in bootstrap]
               + [check_dial_address(a, "peer address") for a in peer.peers])
    return tuple(dict.fromkeys(checked))


def model_spec(settings: Settings, model_dir: Path, trainable: bool = True, *, model_id: str = "",
               threads: int = 0) -> ModelSpec:
    """What a backend needs to load the model with this run's LoRA and optimizer settings.
    `threads` 0: the setting, or 1 where the setting is 0 (auto) and no recommendation was made."""
    lora, t = settings.lora, settings.train
    return ModelSpec(str(model_dir), LoraConfig(lora.rank, lora.alpha, lora.dropout, tuple(lora.target_modules)),
                     OptimConfig(t.learning_rate, t.weight_decay, t.epochs, t.minibatches, t.clip_low, t.clip_high,
                                 t.max_grad_norm),
                     threads=threads or settings.model.threads or 1, trainable=trainable, model_id=model_id,
                     cache_dir=str(user_dirs().cache), precision=settings.model.precision,
                     gpu_memory_fraction=settings.resources.gpu_memory_fraction)


def any_port(listen: str) -> str:
    host = listen.rsplit(":", 1)[0]
    return f"{host}:0"


def load_checkpoint_adapter(backend, engine: str, folder: Path) -> None:
    """Load a checkpoint's adapter; damage is a CheckpointError (the caller tries an older one), a
    checkpoint of another engine's adapter format a UsageError (an older one would not fit either)."""
    conflict = registry.resume_conflict(read_state(folder).backend, engine)
    if conflict:
        raise UsageError(conflict)
    try:
        backend.load_adapter(folder)
    except BackendError as exc:
        raise CheckpointError(str(exc)) from None


def write_failed(path: Path, exc: OSError) -> SwarmError:
    return SwarmError(f"cannot write {path} ({exc.strerror or exc}); free disk space or fix its permissions, "
                      "then run the same command again: it resumes from the last checkpoint", title="Disk")


def detect_hardware(backend: str) -> Hardware:
    """What this machine has; nothing is probed for the fake engine, which needs nothing."""
    if backend == "fake":
        return Hardware()
    from swarm_app.kernel.hardware import detect

    return detect()


def run_dir_of(settings: Settings) -> Path:
    return Path(settings.run.run_dir).expanduser() if settings.run.run_dir else user_dirs().default_run


def usable_listen(config, settings: Settings):
    """The config with a listen address that binds now: a busy default port becomes any free port
    (with a warning); a busy address the user chose is an error."""
    from swarm_app.peer.core.addressbook import parse_address
    from swarm_app.peer.io.ports import bind_error

    host, port = parse_address(config.listen)
    error = bind_error(host, port)
    if error is None:
        return config
    reason = error.strerror or str(error)
    if settings.peer.listen != PeerSettings.listen:
        raise UsageError(f"cannot listen on {config.listen}: {reason}; choose another address with --listen "
                         f"(port 0 picks any free port)", title="Network")
    log.warning("port %d is taken (%s; another swarm node on this machine?): listening on a free port "
                "instead; pass --listen HOST:PORT to choose one", port, reason)
    return dataclasses.replace(config, listen=any_port(config.listen))


def run_seed(settings: Settings, started: dict) -> int:
    """The run's seed: the flag or setting, else the one the run started with, else a new random one."""
    if settings.train.seed >= 0:
        return settings.train.seed
    if "seed" in started:
        return int(started["seed"])
    return random.SystemRandom().randrange(tasks.HELDOUT_SEED)


def check_run_matches(run_dir: Path, model_dir: Path, preset: str, fresh: bool) -> dict:
    """What the existing run was started with ({} for a new run); refuses a different model or preset."""
    path = run_dir / RUN_FILE
    if fresh or not path.exists():
        return {}
    try:
        started = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is unreadable ({exc}); start over with --fresh or choose another --run-dir") from None
    mismatches = [f"{key} {started.get(key)!r} (now {now!r})"
                  for key, now in (("model", str(model_dir)), ("preset", preset))
                  if started.get(key) != now]
    if mismatches:
        raise UsageError(f"the run in {run_dir} was started with {', '.join(mismatches)}; "
                         "resume it with the same settings, start over with --fresh, or choose another --run-dir")
    return started


def move_old_run_aside(run_dir: Path) -> bool:
    """`--fresh`: rename a run folder that holds a run (more than its lock file); True when it moved."""
    if not run_dir.exists() or not any(p.name != LOCK_FILE for p in run_dir.iterdir()):
        return False
    aside = run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.rename(aside)
    log.info("moved the previous run to %s", aside)
    return True


def write_run_file(run_dir: Path, model_dir: Path, settings: Settings, seed: int, backend: str) -> None:
    path = run_dir / RUN_FILE
    if path.exists():
        return
    info = {"model": str(model_dir), "preset": settings.tasks.preset, "seed": seed,
            "backend": backend,
            "created": time.time(), "settings": describe(settings)}
    write_text_atomic(path, json.dumps(info, indent=2))
