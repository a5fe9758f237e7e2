"""Hardware detection: what this machine has, which backend fits, and a sensible batch for its memory.

CUDA is probed through torch only when torch is installed; detection imports nothing else heavy.
"""

from __future__ import annotations

import importlib.util
import os
import platform

from backends.base import Hardware


def detect() -> Hardware:
    import psutil

    cuda, name, memory = _cuda()
    apple = platform.system() == "Darwin" and platform.machine() == "arm64"
    return Hardware(cuda=cuda, cuda_name=name, cuda_memory_bytes=memory, apple_silicon=apple,
                    ram_bytes=psutil.virtual_memory().total, cpu_count=os.cpu_count() or 1)


def _cuda() -> tuple[bool, str, int]:
    if importlib.util.find_spec("torch") is None:
        return False, "", 0
    import torch  # costs ~2 s; the torch backend needs it anyway

    if not torch.cuda.is_available():
        return False, "", 0
    props = torch.cuda.get_device_properties(0)
    return True, props.name, int(props.total_memory)


def describe(hw: Hardware) -> str:
    gib = 1024**3
    parts = [f"{hw.cpu_count} CPU cores", f"{hw.ram_bytes / gib:.0f} GiB RAM"]
    if hw.cuda:
        parts.append(f"CUDA {hw.cuda_name} ({hw.cuda_memory_bytes / gib:.0f} GiB)")
    if hw.apple_silicon:
        parts.append("Apple silicon")
    return ", ".join(parts)
