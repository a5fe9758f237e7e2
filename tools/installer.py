"""The installer's decisions and steps: `install.sh` and `install.ps1` both call this one script.

Owns: detecting the machine (OS, CPU architecture, NVIDIA GPU from nvidia-smi, Apple silicon), deciding
where the isolated environment goes (a venv in the user data dir, the folder platformdirs gives), which
torch build to install (CUDA index by driver, CPU index, or PyPI on macOS), which engine extra, where
the app comes from (--from: a local wheel, sdist or checkout folder; else the checkout or unpacked
release this script sits in, as `sh install.sh` runs it from one; else, fetched on its own, the published
package), and the `swarm` launcher; then running those steps with every choice printed beside its
reason, and ending with `swarm doctor`.

Must not: import anything outside the standard library (it runs before anything is installed), need
root, write outside the user's own folders, edit shell profiles (it prints the PATH line instead), or
delete the environment: a re-run upgrades the app in place, and config, identity and runs live
outside the venv. Detection can be faked for tests and demos with SWARM_INSTALL_FAKE_PLATFORM
(e.g. `windows-amd64`) and SWARM_INSTALL_FAKE_NVIDIA_SMI (nvidia-smi's CSV line, or empty for none).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

APP = "swarm-app"
PYTORCH_INDEX = "https://download.pytorch.org/whl"
ENGINES = ("cuda", "mlx", "llamacpp", "torch")
"""Engine extras of swarm-app (pyproject), plus `torch`: the plain torch engine, no extra."""
NVIDIA_QUERY = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
MIN_PYTHON = (3, 11)


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int
    driver: str


@dataclass(frozen=True)
class Machine:
    """What the decisions depend on: `system` is linux/darwin/windows, `arch` is x86_64 or arm64."""

    system: str
    arch: str
    gpus: tuple[Gpu, ...] = ()

    @property
    def label(self) -> str:
        gpu = f" + {self.gpus[0].name}" if self.gpus else ""
        return f"{self.system}-{self.arch}{gpu}"


@dataclass(frozen=True)
class Options:
    cpu: bool = False
    engine: str | None = None
    source: str | None = None
    """A local wheel, sdist or checkout folder (--from, or the checkout this script sits in); None
    installs the published `swarm-app`."""
    source_reason: str = "the local file given with --from"
    torch_spec: str | None = None
    """Overrides the torch requirement, taken from pip's default index (e.g. `torch==2.13.0`)."""


@dataclass(frozen=True)
class Choice:
    what: str
    value: str
    reason: str


@dataclass
class Plan:
    """Everything the installer will do, decided before anything runs."""

    machine: Machine
    venv: PurePath
    python: PurePath
    swarm: PurePath
    launcher: PurePath | None
    """A symlink to `swarm` in ~/.local/bin (POSIX); None on Windows, where the venv's Scripts is used."""
    torch_command: list[str] | None
    app_command: list[str]
    choices: list[Choice] = field(default_factory=list)
    refused: str | None = None
    """Set when this machine cannot be served; the one-line message says what to do instead."""


# ---------------------------------------------------------------- detection


def normalize_arch(machine: str) -> str:
    arch = machine.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(arch, arch)


def parse_platform(text: str) -> tuple[str, str]:
    """`windows-amd64` -> ("windows", "x86_64"); the form SWARM_INSTALL_FAKE_PLATFORM takes."""
    system, _, arch = text.strip().lower().partition("-")
    if system not in ("linux", "darwin", "macos", "windows") or not arch:
        raise ValueError(f"bad platform {text!r}: use linux|darwin|windows-<arch>, e.g. windows-amd64")
    return ("darwin" if system == "macos" else system), normalize_arch(arch)


def parse_nvidia_smi(text: str) -> tuple[Gpu, ...]:
    """GPUs from `nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader`."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [part.strip() for part in line.rsplit(",", 2)]
        if len(parts) != 3:
            continue
        name, memory, driver = parts
        digits = "".join(ch for ch in memory if ch.isdigit())
        gpus.append(Gpu(name, int(digits) if digits else 0, driver))
    return tuple(gpus)


def run_nvidia_smi() -> str:
    """nvidia-smi's answer, or "" where it is missing, fails or hangs (10 s)."""
    if shutil.which("nvidia-smi") is None:
        return ""
    try:
        done = subprocess.run(NVIDIA_QUERY, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def detect_machine(env: dict[str, str]) -> Machine:
    """This machine, or the one the SWARM_INSTALL_FAKE_* variables describe."""
    fake_platform = env.get("SWARM_INSTALL_FAKE_PLATFORM")
    if fake_platform:
        system, arch = parse_platform(fake_platform)
    else:
        system, arch = platform.system().lower(), normalize_arch(platform.machine())
    smi = env["SWARM_INSTALL_FAKE_NVIDIA_SMI"] if "SWARM_INSTALL_FAKE_NVIDIA_SMI" in env else None
    if smi is None:
        smi = "" if system == "darwin" else run_nvidia_smi()
    return Machine(system, arch, parse_nvidia_smi(smi))


# ---------------------------------------------------------------- decisions


def cuda_index(driver: str) -> str | None:
    """The newest PyTorch CUDA index this driver runs: 12.8 needs 570+, 12.6 560+, 12.4 525+ (minor
    version compatibility); None for an older or unreadable driver."""
    try:
        major = int(driver.split(".")[0])
    except ValueError:
        return None
    return "cu128" if major >= 570 else "cu126" if major >= 560 else "cu124" if major >= 525 else None


def data_dir(system: str, env: dict[str, str]) -> PurePath:
    """platformdirs' user_data_dir(APP, appauthor=False), computed without platformdirs."""
    if system == "windows":
        local = env.get("LOCALAPPDATA") or str(PureWindowsPath(env.get("USERPROFILE", "~"), "AppData", "Local"))
        return PureWindowsPath(local, APP)
    home = env.get("HOME", "~")
    if system == "darwin":
        return PurePosixPath(home, "Library", "Application Support", APP)
    return PurePosixPath(env.get("XDG_DATA_HOME") or PurePosixPath(home, ".local", "share"), APP)


def choose_engine(machine: Machine, options: Options, cuda: str | None) -> Choice:
    if options.engine:
        return Choice("engine extra", options.engine, "asked for with --engine")
    if cuda and not options.cpu:
        return Choice("engine extra", "cuda", f"NVIDIA {machine.gpus[0].name} found by nvidia-smi")
    if machine.system == "darwin" and machine.arch == "arm64" and not options.cpu:
        return Choice("engine extra", "mlx", "Apple silicon: MLX runs on its GPU")
    return Choice("engine extra", "torch", "no GPU: the torch CPU engine, which `swarm run` picks here; "
                  "llama.cpp is opt-in and compiles from source (--engine llamacpp)")


def choose_torch(machine: Machine, options: Options, cuda: str | None, engine: str) -> tuple[Choice, list[str]]:
    """(the choice, pip arguments after `pip install`) for torch."""
    if options.torch_spec:
        return Choice("torch", options.torch_spec, "asked for with --torch-spec (pip's default index)"), [options.torch_spec]
    if machine.system == "darwin":
        return Choice("torch", "torch from PyPI", "PyPI's macOS wheels carry the Metal (MPS) build"), ["torch"]
    if engine == "cuda" and not options.cpu:
        tag = cuda or "cu128"
        why = (f"NVIDIA driver {machine.gpus[0].driver} runs CUDA {tag[2:4]}.{tag[4:]}" if cuda
               else "asked for with --engine cuda; no NVIDIA driver seen, so the newest CUDA build")
        return Choice("torch", f"CUDA build ({tag})", why), ["torch", "--index-url", f"{PYTORCH_INDEX}/{tag}"]
    why = "--cpu given" if options.cpu else (
        f"NVIDIA driver {machine.gpus[0].driver} is older than 525: update it for CUDA" if machine.gpus else
        "no NVIDIA GPU found")
    return Choice("torch", "CPU build", why + "; the CPU index avoids a multi-GB CUDA download"), [
        "torch", "--index-url", f"{PYTORCH_INDEX}/cpu"]


def is_checkout(folder: Path) -> bool:
    """A swarm-app source tree (a clone, or an unpacked release or sdist): pip installs it as it is."""
    project = folder / "pyproject.toml"
    try:
        text = project.read_text(encoding="utf-8")
    except OSError:
        return False
    return f'name = "{APP}"' in text and (folder / "swarm_app").is_dir()


def checkout_around(script: Path) -> Path | None:
    """The checkout this installer sits in (`<checkout>/tools/installer.py`), or None when it was fetched
    on its own (`curl ... | sh` keeps it in a temp folder)."""
    folder = script.resolve().parent.parent
    return folder if is_checkout(folder) else None


def app_requirement(options: Options, engine: str) -> str:
    """The app with its engine's extra and `dht` (the DHT rendezvous; its markers skip it where no wheel exists)."""
    extra = "[dht]" if engine == "torch" else f"[{engine},dht]"
    if options.source:
        return f"{APP}{extra} @ {Path(options.source).resolve().as_uri()}"
    return f"{APP}{extra}"


def plan_install(machine: Machine, options: Options, env: dict[str, str], has_torch: bool = False) -> Plan:
    """Every decision, with its reason; nothing is run or written."""
    windows = machine.system == "windows"
    venv = data_dir(machine.system, env) / "venv"
    bin_dir = venv / ("Scripts" if windows else "bin")
    python = bin_dir / ("python.exe" if windows else "python")
    swarm = bin_dir / ("swarm.exe" if windows else "swarm")
    launcher = None if windows else PurePosixPath(env.get("HOME", "~"), ".local", "bin", "swarm")
    cuda = cuda_index(machine.gpus[0].driver) if machine.gpus else None
    engine = choose_engine(machine, options, cuda)
    torch_choice, torch_args = choose_torch(machine, options, cuda, engine.value)
    requirement = app_requirement(options, engine.value)
    plan = Plan(machine, venv, python, swarm, launcher,
                None if has_torch else [str(python), "-m", "pip", "install", *torch_args],
                [str(python), "-m", "pip", "install", "--upgrade", requirement])
    plan.choices = [
        Choice("machine", machine.label, "detected" if "SWARM_INSTALL_FAKE_PLATFORM" not in env else "faked"),
        Choice("environment", str(venv), "a venv of its own in the user data dir; a re-run upgrades it in place"),
        engine,
        torch_choice if not has_torch else Choice("torch", "kept", "already in the environment"),
        Choice("app", requirement, options.source_reason if options.source else "from PyPI"),
        Choice("launcher", str(launcher or swarm), "the venv's own swarm.exe" if windows
               else "a link in ~/.local/bin to the venv's swarm"),
    ]
    if machine.system == "darwin" and machine.arch == "x86_64" and not options.torch_spec:
        plan.refused = ("PyTorch publishes no macOS x86_64 wheels after 2.2 and swarm-app needs torch>=2.4: "
                        "run it on Apple silicon, Linux or Windows, or pass --torch-spec with a torch you built")
    elif engine.value == "mlx" and not (machine.system == "darwin" and machine.arch == "arm64"):
        plan.refused = "the mlx engine runs on Apple silicon only: drop --engine mlx"
    return plan


# ---------------------------------------------------------------- the decision table


TABLE_MACHINES = (
    ("Linux + NVIDIA", "linux-x86_64", "NVIDIA GeForce RTX 4090, 24564 MiB, 570.124.04"),
    ("Linux CPU-only", "linux-x86_64", ""),
    ("macOS arm64", "darwin-arm64", ""),
    ("macOS x86", "darwin-x86_64", ""),
    ("Windows + NVIDIA", "windows-amd64", "NVIDIA GeForce RTX 4070, 12282 MiB, 551.23"),
    ("Windows CPU", "windows-amd64", ""),
)
TABLE_ENV = {"HOME": "~", "LOCALAPPDATA": "%LOCALAPPDATA%"}


def decision_table(options: Options) -> list[tuple[str, ...]]:
    """(case, engine extra, torch, pip index, environment) for the six machines of TABLE_MACHINES."""
    rows = []
    for case, fake_platform, smi in TABLE_MACHINES:
        machine = Machine(*parse_platform(fake_platform), parse_nvidia_smi(smi))
        plan = plan_install(machine, options, {**TABLE_ENV, "SWARM_INSTALL_FAKE_PLATFORM": fake_platform})
        if plan.refused:
            rows.append((case, "-", "refused", "-", plan.refused))
            continue
        args = plan.torch_command or []
        index = args[args.index("--index-url") + 1] if "--index-url" in args else "PyPI (pip's default)"
        torch = next(c.value for c in plan.choices if c.what == "torch")
        rows.append((case, next(c.value for c in plan.choices if c.what == "engine extra"), torch, index, str(plan.venv)))
    return rows


def format_table(rows: list[tuple[str, ...]]) -> str:
    header = ("machine", "engine extra", "torch", "torch from", "environment")
    lines = [header, tuple("-" * len(h) for h in header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


# ---------------------------------------------------------------- running the plan


def quote(command: list[str], system: str) -> str:
    import shlex

    return subprocess.list2cmdline(command) if system == "windows" else shlex.join(command)


def has_torch(venv: Path) -> bool:
    return any(venv.glob("lib/python3*/site-packages/torch")) or (venv / "Lib" / "site-packages" / "torch").is_dir()


def path_hint(plan: Plan, env: dict[str, str]) -> str | None:
    """The line to add so `swarm` is found, or None when its folder is on PATH already."""
    folder = (plan.launcher or plan.swarm).parent
    if str(folder) in env.get("PATH", "").split(os.pathsep):
        return None
    if plan.machine.system == "windows":
        return (f'add the folder to PATH: [Environment]::SetEnvironmentVariable("Path", "{folder};" + '
                '[Environment]::GetEnvironmentVariable("Path", "User"), "User")  (then open a new terminal)')
    return f'add this line to your shell profile (~/.bashrc, ~/.zshrc): export PATH="{folder}:$PATH"'


def link_launcher(plan: Plan) -> str:
    """Point ~/.local/bin/swarm at the venv's swarm; never replace a file that is not our link."""
    launcher, target = Path(plan.launcher), Path(plan.swarm)
    if launcher.is_symlink() or not launcher.exists():
        launcher.parent.mkdir(parents=True, exist_ok=True)
        if launcher.is_symlink():
            launcher.unlink()
        launcher.symlink_to(target)
        return f"linked {launcher} -> {target}"
    return f"left {launcher} alone (not a link made by this installer); run {target} instead"


def run_step(command: list[str], system: str) -> None:
    print(f"$ {quote(command, system)}", flush=True)
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise SystemExit(f"install failed (exit {done.returncode}) at: {quote(command, system)}\n"
                         "next step: read pip's message above; re-running this installer resumes where it stopped")


def print_plan(plan: Plan) -> None:
    print("swarm-app installer: what it will do and why")
    for choice in plan.choices:
        print(f"  {choice.what:<13} {choice.value}\n  {'':<13} ({choice.reason})")


def execute(plan: Plan, options: Options, dry_run: bool, env: dict[str, str]) -> int:
    """Run (or with dry_run only print) the steps, then `swarm doctor`."""
    system = plan.machine.system
    steps = [] if Path(plan.venv).is_dir() else [[sys.executable, "-m", "venv", str(plan.venv)]]
    steps += [plan.torch_command] if plan.torch_command else []
    steps += [plan.app_command]
    doctor = [str(plan.launcher or plan.swarm), "doctor"]
    if dry_run:
        for command in [*steps, *([["ln", "-sfn", str(plan.swarm), str(plan.launcher)]] if plan.launcher else []), doctor]:
            print(f"$ {quote(command, system)}")
        return 0
    for command in steps:
        run_step(command, system)
    if plan.launcher:
        print(link_launcher(plan))
    hint = path_hint(plan, env)
    if hint:
        print(hint)
    print(f"$ {quote(doctor, system)}", flush=True)
    if subprocess.run([str(plan.swarm), "doctor"], check=False).returncode != 0:
        print(f"installed, but `swarm doctor` failed: run {plan.swarm} doctor and read its message", file=sys.stderr)
        return 1
    print(f"done: `swarm run` starts training ({plan.launcher or plan.swarm})")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="install", description="Install swarm-app into a venv of its own.")
    parser.add_argument("--cpu", action="store_true", help="CPU build of torch even where a GPU is found")
    parser.add_argument("--engine", choices=ENGINES, help="engine extra to install (default: by hardware)")
    parser.add_argument("--from", dest="source", metavar="PATH",
                        help="a local swarm-app wheel, sdist or checkout folder (default: the checkout this "
                             "installer is in; fetched on its own, the published package)")
    parser.add_argument("--torch-spec", metavar="REQ", default=os.environ.get("SWARM_INSTALL_TORCH_SPEC"),
                        help="torch requirement from pip's default index, e.g. torch==2.13.0 "
                             "(env SWARM_INSTALL_TORCH_SPEC)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--table", action="store_true", help="with --dry-run: decisions for six machines")
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask before installing")
    return parser.parse_args(argv)


def source_of(given: str | None) -> tuple[str | None, str]:
    """(what to install, why): --from as given, else the checkout around this script, else None (PyPI)."""
    if given is None:
        checkout = checkout_around(Path(__file__))
        return (str(checkout), f"the checkout this installer was run from ({checkout})") if checkout else (None, "")
    path = Path(given)
    if path.is_dir():
        if not is_checkout(path):
            raise SystemExit(f"--from {given} is not a swarm-app checkout (no pyproject.toml naming {APP} beside "
                             "swarm_app/); give a checkout folder, a .whl or a .tar.gz")
        return given, "the folder given with --from"
    if not path.is_file():
        raise SystemExit(f"--from {given}: no such file or folder; give a swarm-app .whl, .tar.gz or checkout folder")
    return given, "the local file given with --from"


def main(argv: list[str] | None = None) -> int:
    if sys.version_info < MIN_PYTHON:
        raise SystemExit("swarm-app needs Python 3.11 or newer: install it from https://www.python.org/downloads/")
    args = parse_args(argv)
    options = Options(args.cpu, args.engine, *source_of(args.source), args.torch_spec)
    if args.table:
        print(format_table(decision_table(options)))
        return 0
    env = dict(os.environ)
    try:
        machine = detect_machine(env)
    except ValueError as exc:
        raise SystemExit(f"SWARM_INSTALL_FAKE_PLATFORM: {exc}") from None
    dry_run = args.dry_run or "SWARM_INSTALL_FAKE_PLATFORM" in env  # a faked machine is never installed on
    faked = "SWARM_INSTALL_FAKE_PLATFORM" in env
    plan = plan_install(machine, options, env, has_torch=not faked and has_torch(Path(data_dir(machine.system, env), "venv")))
    print_plan(plan)
    if plan.refused:
        print(f"cannot install here: {plan.refused}", file=sys.stderr)
        return 2
    if not (args.yes or dry_run) and sys.stdin.isatty() and input("Go ahead? [Y/n] ").strip().lower() not in ("", "y", "yes"):
        return 1
    return execute(plan, options, dry_run, env)


if __name__ == "__main__":
    raise SystemExit(main())
