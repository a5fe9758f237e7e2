"""Detection from faked inputs (a fake nvidia-smi or sysctl on PATH, a /proc/cpuinfo text) and sizing."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from backends.base import Gpu, Hardware
from swarm_app.kernel import hardware, sizing
from swarm_app.kernel.hardware import Sources

GIB = 1024**3
X86_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c avx512f\n\nprocessor\t: 1\nflags\t\t: fpu\n"
ARM_CPUINFO = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32\n"
RTX_4090 = "NVIDIA GeForce RTX 4090, 24564, 8.9, 550.54.14"


def fake_tool(folder: Path, name: str, script: str) -> Path:
    """An executable `name` in `folder` that runs a POSIX shell script."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + script + "\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


def nvidia_bin(tmp_path: Path, rows: str = RTX_4090) -> Path:
    return fake_tool(tmp_path / "bin", "nvidia-smi", f"printf '%s\\n' '{rows}'")


def mac_bin(tmp_path: Path, chip: str = "Apple M2 Pro", memory: int = 32 * GIB) -> Path:
    return fake_tool(tmp_path / "bin", "sysctl", f'case "$2" in machdep.cpu.brand_string) echo "{chip}";; '
                                                 f'hw.memsize) echo {memory};; *) exit 1;; esac')


def linux(tmp_path, search_path, cpuinfo=X86_CPUINFO) -> Sources:
    return Sources("Linux", "x86_64", cpuinfo, str(search_path), driver_files=(), disk_path=tmp_path,
                   allow_torch_probe=False)


def test_nvidia_gpus_from_nvidia_smi(tmp_path):
    rows = RTX_4090 + "\nTesla T4, 15360, 7.5, 550.54.14"
    hw = hardware.detect(linux(tmp_path, nvidia_bin(tmp_path, rows)))
    assert hw.gpus == (Gpu("NVIDIA GeForce RTX 4090", 24564 * 2**20, "8.9", True), Gpu("Tesla T4", 15360 * 2**20, "7.5", False))
    assert (hw.cuda, hw.cuda_name, hw.cuda_memory_bytes, hw.cuda_driver) == (
        True, "NVIDIA GeForce RTX 4090", 24564 * 2**20, "550.54.14")


def test_an_old_driver_without_compute_cap_still_reports_the_gpu(tmp_path):
    script = 'case "$1" in *compute_cap*) echo "Field compute_cap is not valid" >&2; exit 2;; esac; echo "GTX 1080, 8192, 470.1"'
    hw = hardware.detect(linux(tmp_path, fake_tool(tmp_path / "bin", "nvidia-smi", script)))
    assert hw.gpus == (Gpu("GTX 1080", 8192 * 2**20, "", False),) and hw.cuda_driver == "470.1"


def test_no_nvidia_smi_and_no_driver_files_means_no_gpu_and_no_torch_probe(tmp_path):
    src = Sources("Linux", "x86_64", X86_CPUINFO, str(tmp_path / "empty-bin"), driver_files=(str(tmp_path / "none"),),
                  disk_path=tmp_path, allow_torch_probe=True)
    assert hardware.nvidia_gpus(src) == ([], "")  # would have imported torch had a driver file existed


def test_a_cpu_only_machine(tmp_path):
    hw = hardware.detect(linux(tmp_path, tmp_path / "empty-bin"))
    assert not hw.cuda and hw.gpus == () and not hw.apple_silicon
    assert hw.simd == ("avx2", "avx512f", "fma", "f16c")
    assert hw.ram_bytes > 0 and hw.cpu_count >= 1 and hw.disk_free_bytes > 0


def test_an_arm_linux_cpu_reports_neon(tmp_path):
    assert hardware.detect(linux(tmp_path, tmp_path / "empty-bin", ARM_CPUINFO)).simd == ("neon",)


def test_apple_silicon_from_sysctl(tmp_path):
    src = Sources("Darwin", "arm64", "", str(mac_bin(tmp_path)), driver_files=(), disk_path=tmp_path, allow_torch_probe=False)
    hw = hardware.detect(src)
    assert (hw.apple_silicon, hw.apple_chip, hw.ram_bytes, hw.simd) == (True, "Apple M2 Pro", 32 * GIB, ("neon",))
    assert "Apple silicon Apple M2 Pro" in hardware.describe(hw)


def test_two_processors_that_share_a_model_name_have_different_identities(tmp_path):
    """A cloud's "model name" may say only "AMD EPYC" for two generations whose CPU seconds differ in worth."""
    zen4 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nstepping\t: 1\n"
            "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 99\n")
    zen5 = zen4.replace("25", "26", 1)
    identity = hardware.cpu_identity(linux(tmp_path, tmp_path / "empty-bin", zen4))
    assert identity.startswith("AuthenticAMD family 25 model 17 stepping 1, AMD EPYC, ")  # the first block only
    assert identity != hardware.cpu_identity(linux(tmp_path, tmp_path / "empty-bin", zen5))
    mac = Sources("Darwin", "arm64", "", str(mac_bin(tmp_path)), driver_files=(), disk_path=tmp_path, allow_torch_probe=False)
    assert hardware.cpu_identity(mac).startswith("Apple M2 Pro, ")


def test_free_disk_of_a_folder_not_made_yet(tmp_path):
    assert hardware.free_disk(tmp_path / "not" / "yet") == hardware.free_disk(tmp_path) > 0


# -- sizing ---------------------------------------------------------------------------------------

def cpu_box(cores: int, ram_gib: float) -> Hardware:
    return Hardware(cpu_count=cores * 2, physical_cores=cores, ram_bytes=int(ram_gib * GIB),
                    ram_available_bytes=int(ram_gib * GIB))


def test_threads_follow_physical_cores():
    assert sizing.recommend(cpu_box(2, 24), "torch").threads == 2
    assert sizing.recommend(Hardware(cpu_count=3), "torch").threads == 3  # physical count unknown


def test_a_small_cpu_machine_keeps_the_bundled_model_and_says_why():
    advice = sizing.recommend(cpu_box(2, 24), "torch")
    assert advice.model is sizing.BUNDLED and (advice.batch.local, advice.batch.completions) == (8, 8)
    assert "2 threads" in advice.reason and "8+ cores" in advice.reason


def test_a_big_cpu_machine_gets_the_half_billion_model_with_a_smaller_batch():
    advice = sizing.recommend(cpu_box(16, 64), "llama_cpp")
    assert advice.model is sizing.QWEN_05B and advice.batch == sizing.BATCHES["cpu"]


def test_gpu_memory_decides_the_model_on_cuda():
    def gpu(gib):
        return Hardware(cuda=True, cuda_name="GPU", cuda_memory_bytes=gib * GIB, gpus=(Gpu("GPU", gib * GIB, "8.9", True),),
                        physical_cores=8, ram_bytes=64 * GIB)
    assert sizing.recommend(gpu(24), "torch").model is sizing.QWEN_15B
    assert sizing.recommend(gpu(8), "torch").model is sizing.QWEN_05B
    assert sizing.recommend(gpu(2), "torch").model is sizing.BUNDLED


@pytest.mark.parametrize("ram_gib, expected", [(0.01, "small"), (1, "bundled")])
def test_little_memory_shrinks_the_batch(ram_gib, expected):
    assert sizing.recommend(cpu_box(4, ram_gib), "torch").batch == sizing.BATCHES[expected]
