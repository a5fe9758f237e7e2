"""Where torch runs: the device and the weights' dtype (bf16 where the hardware has it and it pays, else
fp32; CPU on a fixed thread count), the memory free there, and which CUDA version this torch build has
(read without importing torch). Imports torch only inside the functions that need it; never swarm_app.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path


def torch_cuda_build() -> str:
    """The CUDA version this torch was built for ("" for a CPU build or no torch), read from
    torch/version.py without importing torch (~2 s)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return ""
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = version_file.read_text(encoding="utf-8")
    except OSError:
        return ""
    match = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match.group(1) if match else ""


def torch_float32():
    import torch

    return torch.float32


def free_memory(device) -> int:
    """Bytes free where the model will live: the GPU's free memory, or available RAM on CPU."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def where_of(device) -> str:
    return "the GPU" if device.type == "cuda" else "RAM"


BF16_CPU_MIN_PARAMS = 100_000_000
"""From this many parameters `precision = "auto"` holds the model in bf16 on a CPU with native bf16. Measured
(benchmarks/realistic_speed.py, 2 threads, AVX512-BF16, random Qwen2.5-0.5B of 494 M): a round's 16 x 48
tokens in 4.7 s against 12.2 s in fp32, its update in 7.8 s against 18.9 s. Below it a pass is
overhead-bound: on the bundled 3.6 M model a round's update took 0.75 s in both formats."""


def cpu_has_native_bf16() -> bool:
    """True where this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX); elsewhere bf16 is emulated, slower."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def pick_device(threads: int, precision: str = "auto", parameters: int = 0):
    """(device, dtype) for a model of `parameters` weights: CUDA where there is a GPU, else CPU on `threads`
    threads. dtype: `precision` "fp32" or "bf16" as given; "auto" is bf16 on a GPU that supports it and on a
    CPU with native bf16 for a model of BF16_CPU_MIN_PARAMS or more, fp32 otherwise."""
    import torch

    if precision not in ("auto", "fp32", "bf16"):
        raise ValueError(f"precision must be auto, fp32 or bf16, not {precision!r}")
    if torch.cuda.is_available():
        device, native = torch.device("cuda"), torch.cuda.is_bf16_supported()
    else:
        torch.set_num_threads(max(1, threads))
        device = torch.device("cpu")
        native = parameters >= BF16_CPU_MIN_PARAMS and cpu_has_native_bf16()
    bf16 = precision == "bf16" or (precision == "auto" and native)
    return device, torch.bfloat16 if bf16 else torch.float32
