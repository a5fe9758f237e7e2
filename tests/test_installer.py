"""tools/installer.py and install.sh: the decisions under faked detection, dry runs, and (slow) a real
install of a locally built wheel into a temp HOME followed by an offline 2-round run."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL_SH = ROOT / "install.sh"


def load_installer():
    spec = importlib.util.spec_from_file_location("swarm_installer", ROOT / "tools" / "installer.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


installer = load_installer()
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SPEC_4070 = "NVIDIA GeForce RTX 4070, 12282 MiB, 551.23"


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user whose home is `home`: no XDG or SWARM_* overrides, no pip user flags."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SWARM_", "XDG_", "PIP_USER", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(HOME=str(home), **extra)
    return env


def test_decision_table_for_six_machines():
    assert installer.decision_table(installer.Options()) == [
        ("Linux + NVIDIA", "cuda", "CUDA build (cu128)", "https://download.pytorch.org/whl/cu128",
         "~/.local/share/swarm-app/venv"),
        ("Linux CPU-only", "torch", "CPU build", CPU_INDEX, "~/.local/share/swarm-app/venv"),
        ("macOS arm64", "mlx", "torch from PyPI", "PyPI (pip's default)", "~/Library/Application Support/swarm-app/venv"),
        ("macOS x86", "-", "refused", "-",
         "PyTorch publishes no macOS x86_64 wheels after 2.2 and swarm-app needs torch>=2.4: run it on "
         "Apple silicon, Linux or Windows, or pass --torch-spec with a torch you built"),
        ("Windows + NVIDIA", "cuda", "CUDA build (cu124)", "https://download.pytorch.org/whl/cu124",
         r"%LOCALAPPDATA%\swarm-app\venv"),
        ("Windows CPU", "torch", "CPU build", CPU_INDEX, r"%LOCALAPPDATA%\swarm-app\venv"),
    ]


def test_cpu_flag_drops_every_gpu_engine():
    rows = installer.decision_table(installer.Options(cpu=True))
    assert {row[0]: row[1] for row in rows} == {
        "Linux + NVIDIA": "torch", "Linux CPU-only": "torch", "macOS arm64": "torch", "macOS x86": "-",
        "Windows + NVIDIA": "torch", "Windows CPU": "torch"}


def test_faked_detection_reads_platform_and_nvidia_smi():
    machine = installer.detect_machine({"SWARM_INSTALL_FAKE_PLATFORM": "windows-amd64",
                                        "SWARM_INSTALL_FAKE_NVIDIA_SMI": SPEC_4070})
    assert machine == installer.Machine("windows", "x86_64", (installer.Gpu("NVIDIA GeForce RTX 4070", 12282, "551.23"),))
    assert installer.detect_machine({"SWARM_INSTALL_FAKE_PLATFORM": "linux-aarch64",
                                     "SWARM_INSTALL_FAKE_NVIDIA_SMI": ""}) == installer.Machine("linux", "arm64")


def test_nvidia_smi_with_two_gpus_and_commas_in_the_name():
    gpus = installer.parse_nvidia_smi("NVIDIA A100-SXM4-80GB, 81920 MiB, 535.104.05\nTesla T4, Rev 2, 15360 MiB, 470.1\n")
    assert gpus == (installer.Gpu("NVIDIA A100-SXM4-80GB", 81920, "535.104.05"), installer.Gpu("Tesla T4, Rev 2", 15360, "470.1"))


@pytest.mark.parametrize("driver, index", [("470.82", None), ("524.9", None), ("525.60.13", "cu124"),
                                           ("559.99", "cu124"), ("560.28", "cu126"), ("570.86", "cu128"),
                                           ("unknown", None)])
def test_cuda_index_by_driver(driver, index):
    assert installer.cuda_index(driver) == index


def test_bad_fake_platform_is_one_line_with_the_form_to_use():
    with pytest.raises(ValueError, match="use linux\\|darwin\\|windows-<arch>"):
        installer.parse_platform("beos")


def plan_for(fake_platform: str, smi: str = "", env: dict | None = None, **options):
    machine = installer.Machine(*installer.parse_platform(fake_platform), installer.parse_nvidia_smi(smi))
    return installer.plan_install(machine, installer.Options(**options), env or {"HOME": "/home/ada"})


def test_linux_nvidia_plan_commands():
    plan = plan_for("linux-x86_64", "NVIDIA GeForce RTX 4090, 24564 MiB, 570.124.04")
    python = "/home/ada/.local/share/swarm-app/venv/bin/python"
    assert plan.torch_command == [python, "-m", "pip", "install", "torch", "--index-url", "https://download.pytorch.org/whl/cu128"]
    assert plan.app_command == [python, "-m", "pip", "install", "--upgrade", "swarm-app[cuda,dht]"]
    assert str(plan.launcher) == "/home/ada/.local/bin/swarm"


def test_windows_paths_and_old_driver_falls_back_to_cpu():
    plan = plan_for("windows-amd64", "NVIDIA GeForce GTX 970, 4096 MiB, 472.12",
                    env={"LOCALAPPDATA": r"C:\Users\ada\AppData\Local"})
    assert str(plan.python) == r"C:\Users\ada\AppData\Local\swarm-app\venv\Scripts\python.exe"
    assert plan.launcher is None and str(plan.swarm).endswith(r"venv\Scripts\swarm.exe")
    assert plan.torch_command[-2:] == ["--index-url", CPU_INDEX]
    torch = next(c for c in plan.choices if c.what == "torch")
    assert torch.reason.startswith("NVIDIA driver 472.12 is older than 525: update it for CUDA")


def test_xdg_data_home_is_honoured_like_platformdirs():
    plan = plan_for("linux-x86_64", env={"HOME": "/home/ada", "XDG_DATA_HOME": "/data/ada"})
    assert str(plan.venv) == "/data/ada/swarm-app/venv"


def test_torch_spec_and_local_wheel_and_engine_flags(tmp_path):
    wheel = tmp_path / "swarm_app-0.1.0-py3-none-any.whl"
    plan = plan_for("linux-x86_64", torch_spec="torch==2.13.0", source=str(wheel), engine="llamacpp")
    assert plan.torch_command[-1:] == ["torch==2.13.0"] and "--index-url" not in plan.torch_command
    assert plan.app_command[-1] == f"swarm-app[llamacpp,dht] @ {wheel.as_uri()}"


def test_torch_already_installed_is_kept_and_only_the_app_upgrades():
    plan = installer.plan_install(installer.Machine("linux", "x86_64"), installer.Options(), {"HOME": "/h"}, has_torch=True)
    assert plan.torch_command is None
    assert plan.app_command[-2:] == ["--upgrade", "swarm-app[dht]"]
    assert ("torch", "kept") in [(c.what, c.value) for c in plan.choices]


def test_mlx_engine_refused_off_apple_silicon():
    assert plan_for("windows-amd64", engine="mlx").refused == "the mlx engine runs on Apple silicon only: drop --engine mlx"


def run_install_sh(*flags: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(INSTALL_SH), *flags], capture_output=True, text=True, env=env, timeout=600)


def test_install_sh_dry_run_prints_the_commands_and_runs_nothing(tmp_path):
    env = clean_env(tmp_path, SWARM_INSTALL_FAKE_PLATFORM="linux-x86_64", SWARM_INSTALL_FAKE_NVIDIA_SMI="")
    done = run_install_sh("--dry-run", "--torch-spec", "torch==2.13.0", env=env)
    assert done.returncode == 0, done.stderr
    venv = tmp_path / ".local/share/swarm-app/venv"
    commands = [line[2:] for line in done.stdout.splitlines() if line.startswith("$ ")]
    assert commands[1:] == [
        f"{venv}/bin/python -m pip install torch==2.13.0",
        f"{venv}/bin/python -m pip install --upgrade 'swarm-app[dht] @ {ROOT.as_uri()}'",  # the checkout it ran from
        f"ln -sfn {venv}/bin/swarm {tmp_path}/.local/bin/swarm",
        f"{tmp_path}/.local/bin/swarm doctor",
    ]
    assert commands[0].endswith(f"-m venv {venv}")
    assert "(no NVIDIA GPU found" not in done.stdout and "(asked for with --torch-spec" in done.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_faked_platform_never_installs_even_without_dry_run(tmp_path):
    env = clean_env(tmp_path, SWARM_INSTALL_FAKE_PLATFORM="windows-amd64", SWARM_INSTALL_FAKE_NVIDIA_SMI=SPEC_4070,
                    LOCALAPPDATA=str(tmp_path / "Local"))
    done = run_install_sh("--yes", env=env)
    assert done.returncode == 0, done.stderr
    assert "--index-url https://download.pytorch.org/whl/cu124" in done.stdout
    assert "swarm-app[cuda,dht]" in done.stdout and list(tmp_path.iterdir()) == []


def test_install_sh_table_matches_the_decisions(tmp_path):
    done = run_install_sh("--dry-run", "--table", env=clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    table = installer.format_table(installer.decision_table(installer.Options()))
    assert done.stdout.splitlines()[1:] == table.splitlines()


def test_missing_wheel_and_macos_x86_are_one_line_errors(tmp_path):
    done = run_install_sh("--from", str(tmp_path / "nope.whl"), env=clean_env(tmp_path))
    assert done.returncode == 1
    assert done.stderr.strip() == (f"--from {tmp_path / 'nope.whl'}: no such file or folder; give a swarm-app .whl, "
                                   ".tar.gz or checkout folder")
    env = clean_env(tmp_path, SWARM_INSTALL_FAKE_PLATFORM="darwin-x86_64", SWARM_INSTALL_FAKE_NVIDIA_SMI="")
    done = run_install_sh("--dry-run", env=env)
    assert done.returncode == 2 and done.stderr.startswith("cannot install here: PyTorch publishes no macOS x86_64 wheels")


@pytest.mark.slow
def test_install_sh_from_local_wheel_then_offline_run_then_upgrade_in_place(tmp_path):
    """The whole product path: build the wheel, install it with install.sh into a temp HOME (torch
    pinned to the local CPU build), run 2 rounds offline from another folder, re-run the installer."""
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(dist)], check=True)
    wheel = next(dist.glob("swarm_app-*.whl"))
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(home, PATH=os.environ["PATH"], SWARM_PEER_ENABLED="false")
    first = run_install_sh("--from", str(wheel), "--torch-spec", "torch==2.13.0", "--yes", env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    launcher = home / ".local/bin/swarm"
    venv = home / ".local/share/swarm-app/venv"
    assert launcher.is_symlink() and launcher.resolve() == (venv / "bin/swarm").resolve()
    assert f'export PATH="{home}/.local/bin:$PATH"' in first.stdout
    work = tmp_path / "elsewhere"
    work.mkdir()
    run = subprocess.run([str(launcher), "run", "--no-ui", "--rounds", "2", "--offline"], cwd=work,
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "round 2/2" in run.stdout
    runs = home / ".local/share/swarm-app/runs/default"
    assert (runs / "metrics.jsonl").read_text(encoding="utf-8").count("\n") == 2
    (venv / "kept-marker").write_text("venv not recreated", encoding="utf-8")
    again = run_install_sh("--from", str(wheel), "--yes", env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "torch         kept" in again.stdout and "-m venv" not in again.stdout
    assert (venv / "kept-marker").exists() and (runs / "metrics.jsonl").exists()


# --- issue 29: the installer installs what it was run from


def test_from_a_checkout_it_installs_the_checkout_and_says_so(tmp_path):
    env = clean_env(tmp_path, SWARM_INSTALL_FAKE_PLATFORM="linux-x86_64", SWARM_INSTALL_FAKE_NVIDIA_SMI="")
    done = run_install_sh("--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    assert f"--upgrade 'swarm-app[dht] @ {ROOT.as_uri()}'" in done.stdout and "from PyPI" not in done.stdout
    assert f"the checkout this installer was run from ({ROOT})" in done.stdout


def test_from_accepts_a_folder_and_refuses_one_that_is_not_swarm_app(tmp_path):
    env = clean_env(tmp_path, SWARM_INSTALL_FAKE_PLATFORM="linux-x86_64", SWARM_INSTALL_FAKE_NVIDIA_SMI="")
    done = run_install_sh("--dry-run", "--from", str(ROOT), "--engine", "llamacpp", env=env)
    assert done.returncode == 0, done.stderr
    assert f"'swarm-app[llamacpp,dht] @ {ROOT.as_uri()}'" in done.stdout
    done = run_install_sh("--dry-run", "--from", str(tmp_path), env=env)
    assert done.returncode == 1 and "is not a swarm-app checkout" in done.stderr


def test_an_installer_fetched_on_its_own_still_installs_the_published_package(tmp_path):
    """`curl .../install.sh | sh` runs installer.py from a temp file, away from any checkout: PyPI's swarm-app."""
    alone = tmp_path / "fetched"
    alone.mkdir()
    (alone / "installer.py").write_bytes((ROOT / "tools" / "installer.py").read_bytes())
    env = clean_env(tmp_path, SWARM_INSTALL_FAKE_PLATFORM="linux-x86_64", SWARM_INSTALL_FAKE_NVIDIA_SMI="")
    done = subprocess.run([sys.executable, str(alone / "installer.py"), "--dry-run"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "-m pip install --upgrade 'swarm-app[dht]'\n" in done.stdout and "(from PyPI)" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_install_sh_in_a_fresh_clone_installs_that_clone_and_it_trains(tmp_path):
    """Issue 29: `sh install.sh` from a clone used to ask PyPI for swarm-app ("No matching distribution")."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(home, PATH=os.environ["PATH"])
    done = subprocess.run(["sh", "install.sh", "--yes", "--torch-spec", "torch==2.13.0"], cwd=clone,
                          capture_output=True, text=True, env=env, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"swarm-app[dht] @ {clone.as_uri()}" in done.stdout
    work = tmp_path / "elsewhere"
    work.mkdir()
    run = subprocess.run([str(home / ".local/bin/swarm"), "run", "--no-ui", "--offline", "--rounds", "2"], cwd=work,
                         capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "round 2/2" in run.stdout and "Traceback" not in run.stderr
