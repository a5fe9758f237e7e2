"""Hardware detection: what this machine has (GPUs, Apple silicon, CPU, memory, disk), cheaply.

Owns reading the machine: `nvidia-smi` and `sysctl` (run without a shell, 5 s timeout), /proc/cpuinfo,
psutil, free disk. It imports torch only as a last resort, on a machine that shows NVIDIA driver files
but has no working nvidia-smi (torch costs ~2 s to import; a machine without the driver never pays it).
MLX is looked up with importlib's find_spec, never imported. Everything read comes in through
`Sources`, so tests describe a Linux+NVIDIA box, a CPU-only box or an M-series Mac without having one.
Must not choose an engine (backends/registry.py does) nor size the work (swarm_app/kernel/sizing.py does).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from backends.base import Gpu, Hardware

log = logging.getLogger(__name__)

GIB = 1024**3
PROBE_TIMEOUT_S = 5.0
NVIDIA_QUERY = ("name", "memory.total", "compute_cap", "driver_version")
SIMD_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx_vnni", "fma", "f16c", "neon")
"""The vector extensions llama.cpp and torch pick kernels by; "asimd" on ARM Linux reads as "neon"."""
CPU_ID_FIELDS = (("vendor_id", ""), ("cpu family", "family "), ("model", "model "), ("stepping", "stepping "),
                 ("CPU implementer", "implementer "), ("CPU part", "part "))
"""The /proc/cpuinfo fields (x86, then ARM) that tell processor generations apart, with their labels."""


@dataclass(frozen=True)
class Sources:
    """Where detection reads from. `live_sources()` is this machine; tests pass their own."""

    system: str
    machine: str
    cpuinfo: str = ""
    """/proc/cpuinfo text ("" where there is none)."""
    search_path: str | None = None
    """PATH to find nvidia-smi and sysctl on (None: the process's PATH)."""
    driver_files: tuple[str, ...] = ("/proc/driver/nvidia",)
    disk_path: Path = field(default_factory=Path.home)
    allow_torch_probe: bool = True
    """False in tests: never fall back to importing torch."""


def live_sources() -> Sources:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cpuinfo = ""
    return Sources(platform.system(), platform.machine(), cpuinfo, disk_path=_data_dir())


def _data_dir() -> Path:
    from swarm_app.kernel.paths import user_dirs

    return user_dirs().data


def detect(sources: Sources | None = None) -> Hardware:
    """This machine (or the one `sources` describes)."""
    import psutil  # ~10 ms; only commands that look at the machine need it

    src = sources or live_sources()
    gpus, driver = nvidia_gpus(src)
    apple = src.system == "Darwin" and src.machine == "arm64"
    memory = psutil.virtual_memory()
    first = gpus[0] if gpus else None
    return Hardware(
        cuda=bool(gpus), cuda_name=first.name if first else "", cuda_memory_bytes=first.memory_bytes if first else 0,
        apple_silicon=apple, ram_bytes=(_sysctl_int(src, "hw.memsize") if apple else 0) or memory.total,
        cpu_count=psutil.cpu_count() or os.cpu_count() or 1, physical_cores=psutil.cpu_count(logical=False) or 0,
        gpus=tuple(gpus), cuda_driver=driver, apple_chip=_sysctl(src, "machdep.cpu.brand_string") if apple else "",
        mlx_installed=importlib.util.find_spec("mlx") is not None, simd=simd_flags(src),
        ram_available_bytes=memory.available, disk_free_bytes=free_disk(src.disk_path),
        system=src.system, machine=src.machine,
    )


def nvidia_gpus(src: Sources) -> tuple[list[Gpu], str]:
    """(GPUs, driver version) from nvidia-smi; from torch only when driver files exist but nvidia-smi fails."""
    rows = _nvidia_smi_rows(src)
    if rows is not None:
        return [_gpu_from_row(row) for row in rows], (rows[0][3] if rows and len(rows[0]) > 3 else "")
    if src.allow_torch_probe and any(Path(p).exists() for p in src.driver_files):
        return _torch_gpus(), ""
    return [], ""


def _nvidia_smi_rows(src: Sources) -> list[list[str]] | None:
    """CSV rows of the query, None when nvidia-smi is absent or fails (older drivers lack compute_cap)."""
    exe = shutil.which("nvidia-smi", path=src.search_path)
    if exe is None:
        return None
    for fields in (NVIDIA_QUERY, ("name", "memory.total", "driver_version")):
        out = _run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
        if out is not None:
            rows = [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]
            if "compute_cap" not in fields:
                rows = [[r[0], r[1], "", r[2] if len(r) > 2 else ""] for r in rows]
            return rows
    return None


def _gpu_from_row(row: list[str]) -> Gpu:
    name, memory_mib, capability = row[0], row[1], row[2] if len(row) > 2 else ""
    try:
        memory = int(float(memory_mib) * 1024**2)
    except ValueError:
        memory = 0
    return Gpu(name, memory, capability, bf16=_capability_at_least(capability, 8.0))


def _capability_at_least(capability: str, minimum: float) -> bool:
    try:
        return float(capability) >= minimum
    except ValueError:
        return False


def _torch_gpus() -> list[Gpu]:
    if importlib.util.find_spec("torch") is None:
        return []
    import torch  # last resort, see the module docstring

    if not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        capability = f"{props.major}.{props.minor}"
        gpus.append(Gpu(props.name, int(props.total_memory), capability, _capability_at_least(capability, 8.0)))
    return gpus


def simd_flags(src: Sources) -> tuple[str, ...]:
    """Vector extensions from /proc/cpuinfo ("flags" on x86, "Features" on ARM); NEON on any arm64 Mac."""
    found: set[str] = set()
    for line in src.cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            words = set(value.split())
            found |= words & set(SIMD_FLAGS)
            if "asimd" in words:
                found.add("neon")
            break
    if src.system == "Darwin" and src.machine == "arm64":
        found.add("neon")
    return tuple(flag for flag in SIMD_FLAGS if flag in found)


def cpu_identity(src: Sources | None = None) -> str:
    """The processor as one line, for telling apart figures measured in CPU seconds on different machines
    ("AuthenticAMD family 26 model 2 stepping 1, AMD EPYC, 2 CPUs"): vendor, family, model and stepping from
    /proc/cpuinfo, where a cloud's "model name" alone may say only "AMD EPYC"; the brand string on a Mac."""
    src = src or live_sources()
    fields: dict[str, str] = {}
    for line in src.cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block describes them all
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    parts = [" ".join(f"{label}{fields[key]}" for key, label in CPU_ID_FIELDS if fields.get(key)),
             fields.get("model name", "")]
    if src.system == "Darwin":
        parts.append(_sysctl(src, "machdep.cpu.brand_string"))
    named = ", ".join(part for part in parts if part) or platform.processor() or src.machine or "unknown CPU"
    return f"{named}, {os.cpu_count() or 1} CPUs"


def free_disk(path: Path) -> int:
    """Free bytes on the disk that holds `path` (or its nearest existing parent); 0 when unknown."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return 0
    return 0


def _sysctl(src: Sources, key: str) -> str:
    exe = shutil.which("sysctl", path=src.search_path)
    out = _run([exe, "-n", key]) if exe else None
    return (out or "").strip()


def _sysctl_int(src: Sources, key: str) -> int:
    text = _sysctl(src, key)
    return int(text) if text.isdigit() else 0


def _run(argv: list[str]) -> str | None:
    """stdout of a short probe, None when it fails; never through a shell."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("probe %s failed: %s", argv[0], exc)
        return None
    if done.returncode != 0:
        log.debug("probe %s exited %d: %s", argv[0], done.returncode, done.stderr.strip()[:200])
        return None
    return done.stdout


def describe(hw: Hardware) -> str:
    """One line for people: cores, memory, GPU or Apple chip."""
    cores = f"{hw.physical_cores} cores ({hw.cpu_count} threads)" if hw.physical_cores else f"{hw.cpu_count} CPU threads"
    parts = [cores, f"{hw.ram_bytes / GIB:.0f} GiB RAM"]
    if hw.simd:
        parts.append("/".join(hw.simd))
    for gpu in hw.gpus or ((Gpu(hw.cuda_name, hw.cuda_memory_bytes),) if hw.cuda else ()):
        extra = f", compute {gpu.compute_capability}" if gpu.compute_capability else ""
        parts.append(f"CUDA {gpu.name} ({gpu.memory_bytes / GIB:.0f} GiB{extra}{', bf16' if gpu.bf16 else ''})")
    if hw.apple_silicon:
        parts.append(f"Apple silicon {hw.apple_chip}".rstrip() + (", mlx installed" if hw.mlx_installed else ""))
    return ", ".join(parts)
