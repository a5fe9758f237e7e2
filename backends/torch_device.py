"""Where torch runs: the device and dtype (CUDA with bf16 where supported, else CPU fp32 on a fixed
thread count), the memory free there, and which CUDA version this torch build has (read without
importing torch). Imports torch only inside the functions that need it; never swarm_app.
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


def pick_device(threads: int):
    """(device, dtype): CUDA with bf16 where supported (fp32 otherwise), else CPU fp32 on `threads` threads."""
    import torch

    if torch.cuda.is_available():
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
        return torch.device("cuda"), dtype
    torch.set_num_threads(max(1, threads))
    return torch.device("cpu"), torch.float32
