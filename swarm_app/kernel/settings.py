"""The one `Settings` object: typed sections, a docstring per field, validation with clear messages.

Precedence: defaults < the model's recommended settings (its folder's `swarm.toml`, applied once the model
is known: swarm_app/session/recommendations.py) < a command's own defaults (`swarm demo`: 10 rounds) <
`config.toml` (user config dir, or `--config FILE`) < `SWARM_<SECTION>_<FIELD>` environment variables <
command-line flags. `Settings.given` records which keys a layer above the model's set. A field
that a flag can set names the flag in its metadata (`flag`, `metavar`); swarm_app/commands/flags.py
declares the flags from there. Built once per command and passed down; no globals.
Unknown keys and bad values raise `UsageError` naming the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from backends import registry
from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.swarms import DHT_ROUTERS


def setting(default: Any, doc: str, *, choices: tuple | None = None, low: float | None = None,
            high: float | None = None, flag: str = "", metavar: str = "", flag_help: str = "") -> Any:
    """A settings field with its docstring, allowed values and command-line flag, kept where validation
    and the CLI read them. The flag's help is the docstring, or `flag_help` where the flag reads
    differently from the field (a boolean's flag sets the opposite of its default: --no-ui)."""
    meta = {"doc": doc, "choices": choices, "low": low, "high": high, "flag": flag, "metavar": metavar,
            "flag_help": flag_help}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class ModelSettings:
    path: str = setting("", "Model: a local HF folder or a Hugging Face id in the local cache. Empty: the bundled model.",
                        flag="--model", metavar="PATH_OR_HF_ID")
    backend: str = setting("auto", "Engine for generation and LoRA updates (auto: the best one detected; "
                           "see swarm doctor).", choices=("auto", *registry.ENGINES), flag="--backend", metavar="NAME")
    threads: int = setting(0, "CPU threads for the engine. 0: one per physical core (`swarm doctor` shows the "
                           "figure); 1 keeps a machine that also runs other work steady.", low=0, high=256,
                           flag="--threads", metavar="N")
    precision: str = setting("auto", "Number format of the model's weights (torch): auto (bf16 on a CUDA GPU that "
                             "has it, and on a CPU with native bf16, AVX512-BF16 or AMX, for models of 100 M "
                             "parameters or more; fp32 elsewhere), fp32, bf16. The LoRA adapter stays fp32.",
                             choices=("auto", "fp32", "bf16"))
    max_new_tokens: int = setting(48, "Longest completion in tokens.", low=1, high=8192)
    temperature: float = setting(1.0, "Sampling temperature for training rollouts.", low=0.0, high=5.0)
    top_p: float = setting(1.0, "Nucleus sampling mass for training rollouts.", low=0.0, high=1.0)


@dataclass
class LoraSettings:
    rank: int = setting(16, "LoRA rank r.", low=1, high=1024)
    alpha: int = setting(32, "LoRA alpha; the update is scaled by alpha / r.", low=1, high=4096)
    dropout: float = setting(0.0, "LoRA dropout.", low=0.0, high=0.9)
    target_modules: list = setting(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                                   "Linear layers that get LoRA adapters.")


@dataclass
class TrainSettings:
    local: int = setting(8, "I: own questions (rollout groups) per round.", low=1, high=256, flag="--local", metavar="I")
    external: int = setting(0, "J: peers' rollout groups per round (0 trains alone; with no peer connected, "
                            "J more own questions).", low=0, high=256,
                            flag="--external", metavar="J")
    completions: int = setting(8, "L: completions per question (GRPO group size).", low=2, high=64,
                               flag="--completions", metavar="L")
    rounds: int = setting(0, "Total rounds of the run; a resumed run continues up to this. 0: until stopped.", low=0,
                          flag="--rounds", metavar="N")
    seed: int = setting(-1, "Seed for task draws and sampling. -1: drawn at random when a run starts and kept "
                        "with the run (nodes of a swarm must not all draw the same questions).", low=-1, high=2**31 - 2,
                        flag="--seed", metavar="S")
    learning_rate: float = setting(3e-4, "Adam learning rate.", low=0.0, high=1.0)
    weight_decay: float = setting(0.0, "AdamW weight decay.", low=0.0, high=1.0)
    epochs: int = setting(1, "Passes over one round's data.", low=1, high=16)
    minibatches: int = setting(2, "Optimizer steps per epoch (the round's data split evenly).", low=1, high=64)
    clip_low: float = setting(0.2, "GRPO ratio clip below 1 (eps_low).", low=0.0, high=1.0)
    clip_high: float = setting(0.28, "GRPO ratio clip above 1 (eps_high).", low=0.0, high=10.0)
    max_grad_norm: float = setting(1.0, "Gradient clipping norm.", low=0.0)
    negative_weight: float = setting(1.0, "Scale of negative advantages (completions worse than their group's mean); "
                                     "1 is plain GRPO, below 1 leans on reinforcing right answers.", low=0.0, high=1.0)
    external_policy: str = setting(
        "uniform", "What a round does when peers hand it fewer than J groups: uniform (train on those), fill "
        "(also answer further own questions in the empty places, so the update always holds I + J groups), "
        "adaptive (peers' groups with a reward spread first, then as many own questions as cover the shortfall "
        "to signal_target, between adaptive_floor and I + J; see swarm_app/training/supply.py). With no peer "
        "connected, own questions take the J places under each.",
        choices=("uniform", "fill", "adaptive"))
    signal_target: float = setting(
        0.0, "Groups with a reward spread the adaptive update aims at per round (0: I + J, every group of the "
        "update). The solo recipe's figure is the one to give: what a node at I + J / 0 trains on.",
        low=0.0, high=512.0)
    adaptive_floor: int = setting(0, "Fewest own questions a round under the adaptive update, so every node keeps "
                                  "contributing (0: I).", low=0, high=256)
    keep_zero_advantage_local: bool = setting(
        True, "Train on own groups with equal rewards (paper: yes; they add nothing to the loss).")
    checkpoint_every: int = setting(1, "Checkpoint every k rounds (and on Ctrl-C).", low=1)
    eval_every: int = setting(5, "Held-out evaluation every N rounds (0: never).", low=0)
    eval_n: int = setting(64, "Held-out questions per evaluation.", low=1, high=100000)
    rollback: bool = setting(True, "Go back to the best-evaluated checkpoint when held-out accuracy falls below the "
                             "best by more than its noise (4 standard errors of the difference at the evaluation's "
                             "size; swarm_app/training/rollback.py). false: never.")


@dataclass
class TaskSettings:
    preset: str = setting("easy", "Task mix: easy or paper (the paper's nine tasks; see swarm_app/kernel/tasks.py).",
                          flag="--tasks", metavar="PRESET")


@dataclass
class PeerSettings:
    enabled: bool = setting(True, "Join the swarm: share own rollouts and receive peers' (false: no network at all).",
                            flag="--offline", flag_help="no network at all: train alone")
    listen: str = setting("0.0.0.0:47470", "HOST:PORT to accept peers on; if the port is taken, a free one is used.",
                          flag="--listen", metavar="HOST:PORT")
    swarm: str = setting("", "Swarm to join, by name: nodes of other swarms are refused. Empty: the public swarm of "
                         "the task preset (easy, paper). Lowercase letters, digits, '.', '_', '-'.",
                         flag="--swarm", metavar="NAME")
    bootstrap: list = setting([], "Bootstrap addresses, HOST:PORT each, dialed first to join the swarm; or dns:NAME "
                              "(dns:NAME@IP:PORT: ask that DNS server), whose SRV or TXT records list them (needs "
                              "dnspython: pip install \"swarm-app[dns]\"). Not given: the list the app ships for a "
                              "public swarm (empty so far: no public bootstrap node runs yet). Given: replaces that "
                              "list.", flag="--bootstrap", metavar="HOST:PORT")
    peers: list = setting([], "Peers to dial first, HOST:PORT each, on top of the bootstrap list (more come from "
                          "mDNS, peer exchange, the peer table).", flag="--peer", metavar="HOST:PORT")
    upnp: bool = setting(True, "Ask the home router to forward the listen port with UPnP (needs the extra: pip install "
                         "\"swarm-app[upnp]\"); peers then check by dialing back.",
                         flag="--no-upnp", flag_help="do not ask the router to forward the port (UPnP)")
    mdns: bool = setting(True, "Announce and find nodes on the local network with mDNS.",
                         flag="--no-mdns", flag_help="no LAN discovery")
    dht: bool = setting(True, "Find the swarm by name on the BitTorrent Mainline DHT and announce this node's port "
                        "there (needs the extra: pip install \"swarm-app[dht]\"). Anyone who knows the swarm's name "
                        "can then list its members' addresses.",
                        flag="--no-dht", flag_help="do not look the swarm up or announce this node on the BitTorrent DHT")
    swarm_key: str = setting("", "The swarm creator's public key, as `swarm hub --sign-record` prints it (43 characters): "
                             "the node reads the swarm's signed record of hubs on the DHT and dials them first, as "
                             "bootstrap addresses nobody else can forge. Empty: the swarm is found by its name alone.",
                             flag="--swarm-key", metavar="KEY")
    dht_listen: str = setting("", "HOST:PORT of the DHT's UDP socket. Empty: the listen host, any free port.")
    dht_nodes: list = setting([], "DHT nodes to seed the routing table with, HOST:PORT each (a private DHT).")
    dht_routers: list = setting(list(DHT_ROUTERS), "DHT routers asked first to join the DHT, HOST:PORT each "
                                "(public ones by default; empty: none, for a private DHT given with dht_nodes).")
    share: bool = setting(True, "Send own rollouts to peers (false: only receive).",
                          flag="--no-share", flag_help="do not send own rollouts (still receive)")
    metrics_listen: str = setting("", "HOST:PORT for Prometheus /metrics. Empty: on the peer port, to localhost only.",
                                  flag="--metrics-listen", metavar="HOST:PORT")
    identity: str = setting("", "Name of this node's key when one machine runs several nodes (`--gpus` names them "
                            "gpu-0, gpu-1, ...): letters, digits and '-'. Empty: the machine's one key.")


@dataclass
class RunSettings:
    run_dir: str = setting("", "Run folder (metrics, checkpoints). Empty: the default run in the user data dir.",
                           flag="--run-dir", metavar="DIR")
    log_format: str = setting("text", "Headless log lines.", choices=("text", "json"), flag="--log-format")
    ui: bool = setting(True, "Show the terminal UI (false: headless lines).", flag="--no-ui",
                       flag_help="headless: one line per round (also when there is no terminal)")


@dataclass
class ResourcesSettings:
    level: str = setting("full", "How much of this computer the node may use: light (one thread, lowest priority, "
                         "pauses while other programs keep the CPU busy), medium (half the cores), full (every core). "
                         "Within it the thread count adapts to what else runs, unless --threads fixes it.",
                         choices=("light", "medium", "full"), flag="--level", metavar="LEVEL")
    threads: int = setting(0, "Most CPU threads the engine may use (0: the level's).", low=0, high=256)
    cpu_share: float = setting(0.0, "Most of the CPU cores the engine may use, in % (0: the level's).", low=0.0, high=100.0)
    memory_gib: float = setting(0.0, "Pause training while this process holds more memory than this, in GiB (0: no cap).",
                                low=0.0, high=65536.0)
    gpu_memory_fraction: float = setting(0.0, "Most of the GPU's memory the torch engine may take (CUDA; 0: no cap).",
                                         low=0.0, high=1.0)
    low_priority: bool = setting(True, "Run below normal scheduling priority (nice 10, or 19 at level light; "
                                 "below-normal on Windows), so the owner's programs come first.")
    pause_on_battery: bool = setting(True, "Pause training while the computer runs on battery (the node keeps "
                                     "serving its peers).")
    pause_when_busy: bool = setting(False, "Pause training while other programs use more than busy_cpu_percent of "
                                    "the CPU (always on at level light).")
    busy_cpu_percent: float = setting(50.0, "Other programs' CPU use (% of the machine) that counts as busy.",
                                      low=1.0, high=100.0)
    schedule: str = setting("", "Hours training may run, HH:MM-HH:MM (may wrap midnight, e.g. 22:00-07:00); "
                            "empty: any time.")


@dataclass
class Settings:
    model: ModelSettings = field(default_factory=ModelSettings)
    lora: LoraSettings = field(default_factory=LoraSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    tasks: TaskSettings = field(default_factory=TaskSettings)
    peer: PeerSettings = field(default_factory=PeerSettings)
    run: RunSettings = field(default_factory=RunSettings)
    resources: ResourcesSettings = field(default_factory=ResourcesSettings)
    given: set = field(default_factory=set, compare=False, repr=False)
    """The "section.field" keys set by a command's default, config.toml, SWARM_* or a flag: a model's
    recommended settings never replace these."""

    def sections(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "given"}


def load_settings(config_file: Path | None, env: Mapping[str, str], overrides: Mapping[str, Any],
                  *, config_required: bool = False, command_defaults: Mapping[str, Any] | None = None) -> Settings:
    """Build settings from the layers. `overrides` maps "section.field" to a value from a flag (None: not
    given); `command_defaults` maps "section.field" to the command's own default (below config.toml)."""
    settings = Settings()
    for dotted, value in (command_defaults or {}).items():
        section, name = dotted.split(".")
        set_value(settings, section, name, value, source="the command's default")
    if config_file is not None and (config_required or config_file.exists()):
        apply_mapping(settings, read_config(config_file), source=str(config_file))
    apply_env(settings, env)
    for dotted, value in overrides.items():
        if value is not None:
            section, name = dotted.split(".")
            set_value(settings, section, name, value, source="command line")
    return settings


def read_config(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror}; fix the path or its permissions") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML ({exc}); fix it or move it away") from None


def apply_mapping(settings: Settings, data: Mapping, source: str) -> None:
    sections = settings.sections()
    for section, values in data.items():
        if section not in sections:
            raise UsageError(f"{source}: unknown section [{section}]; known: {', '.join(sections)}")
        if not isinstance(values, Mapping):
            raise UsageError(f"{source}: [{section}] must be a table of settings")
        for name, value in values.items():
            set_value(settings, section, name, value, source=source)


def apply_env(settings: Settings, env: Mapping[str, str], strict: bool = False) -> None:
    """Set the fields named by SWARM_<SECTION>_<FIELD> variables; `strict`: refuse an unknown section too."""
    sections = settings.sections()
    for key, raw in env.items():
        if not key.startswith("SWARM_") or key == "SWARM_HOME":
            continue
        section, _, name = key[len("SWARM_"):].lower().partition("_")
        if section not in sections:
            if strict:
                raise UsageError(f"{key}: no settings section [{section}]; known: {', '.join(sections)}")
            continue  # SWARM_* variables of other tools are none of our business
        set_value(settings, section, name, parse_env_value(raw), source=f"environment variable {key}")


def parse_env_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare string


def set_value(settings: Settings, section: str, name: str, value: Any, source: str) -> None:
    """Set one field from a layer above the model's recommendations (and record it in `given`)."""
    target = getattr(settings, section)
    known = {f.name: f for f in fields(target)}
    if name not in known:
        raise UsageError(f"{source}: unknown setting {section}.{name}; known: {', '.join(known)}")
    setattr(target, name, coerce(known[name], f"{section}.{name}", value, source))
    settings.given.add(f"{section}.{name}")


def field_of(key: str) -> dataclasses.Field:
    """The field behind a "section.field" key (its metadata holds the doc, bounds and flag)."""
    section, name = key.split(".")
    return {f.name: f for f in fields(getattr(Settings(), section))}[name]


def default_of(spec: dataclasses.Field) -> Any:
    return spec.default if spec.default is not dataclasses.MISSING else spec.default_factory()


def coerce(spec: dataclasses.Field, key: str, value: Any, source: str) -> Any:
    kind = type(default_of(spec))
    meta = spec.metadata
    try:
        if kind is bool:
            value = parse_bool(value)
        elif kind is int and not isinstance(value, bool):
            value = int(value) if float(value) == int(float(value)) else _raise()
        elif kind is float and not isinstance(value, bool):
            value = float(value)
        elif kind is list:
            value = ([str(v) for v in value] if isinstance(value, list)
                     else [s.strip() for s in str(value).split(",") if s.strip()])
        elif kind is str:
            value = str(value)
        else:
            _raise()
    except (TypeError, ValueError):
        raise UsageError(f"{source}: {key} must be {kind.__name__}, got {value!r}") from None
    if meta.get("choices") and value not in meta["choices"]:
        raise UsageError(f"{source}: {key} = {value!r} is not allowed; choose one of: {', '.join(meta['choices'])}")
    low, high = meta.get("low"), meta.get("high")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"{low} to {high}" if high is not None else f">= {low}"
        raise UsageError(f"{source}: {key} = {value!r} is out of range; allowed: {bounds}")
    return value


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def _raise() -> Any:
    raise ValueError


def describe(settings: Settings) -> dict:
    """Plain dict of all settings (for run metadata)."""
    return {name: dataclasses.asdict(section) for name, section in settings.sections().items()}
