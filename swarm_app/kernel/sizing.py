"""Sizing the work to the machine: threads, model, batch (I, L) and completion length, with the reason.

Owns the rule of thumb, nothing else: it reads a `Hardware` and the chosen engine's name and returns a
`Recommendation`; it never changes settings (the session decides what to apply) and never imports an
engine. The memory model is deliberately rough: weights (2 bytes a parameter in bf16 on a GPU that has
it, else 4) times 4 for activations, LoRA state and workspace, plus the rollout KV cache; a model
must fit in 70% of the memory the engine will use (GPU memory on CUDA, else RAM).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.base import Hardware

GIB = 1024**3
USABLE_FRACTION = 0.7
CPU_CORES_FOR_REAL_MODELS = 8
"""Below this many physical cores, a 0.5B model takes minutes per round on CPU: keep the bundled one."""


@dataclass(frozen=True)
class ModelChoice:
    path: str
    """--model value ("" is the bundled model)."""
    label: str
    params: float
    kv_bytes_per_token: int
    """fp32 K + V over all layers, per token."""


BUNDLED = ModelChoice("", "the bundled swarm-tiny (3.6 M parameters)", 3_554_816, 2 * 4 * 256 * 4)
"""Its parameters as counted from its model.safetensors (tests/test_says_what_it_does.py checks it)."""
QWEN_05B = ModelChoice("Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct", 0.49e9, 2 * 24 * 128 * 4)
QWEN_15B = ModelChoice("Qwen/Qwen2.5-1.5B-Instruct", "Qwen2.5-1.5B-Instruct", 1.54e9, 2 * 28 * 256 * 4)
LARGEST_FIRST = (QWEN_15B, QWEN_05B, BUNDLED)


@dataclass(frozen=True)
class Batch:
    local: int
    """I: own questions per round."""
    completions: int
    """L: completions per question."""
    max_new_tokens: int
    prompt_tokens: int = 256

    @property
    def sequences(self) -> int:
        return self.local * self.completions


BATCHES = {"bundled": Batch(8, 8, 48), "gpu": Batch(8, 8, 256), "cpu": Batch(4, 8, 128), "small": Batch(4, 4, 48)}


@dataclass(frozen=True)
class Recommendation:
    threads: int
    model: ModelChoice
    batch: Batch
    memory_bytes: int
    """What the engine has to work with (GPU memory or RAM)."""
    reason: str


def needed_bytes(model: ModelChoice, batch: Batch, bytes_per_param: int) -> int:
    weights = model.params * bytes_per_param * 4
    kv = batch.sequences * (batch.prompt_tokens + batch.max_new_tokens) * model.kv_bytes_per_token
    return int(weights + kv)


def recommend(hw: Hardware, engine: str) -> Recommendation:
    """Threads = physical cores; the largest model that fits and is fast enough here; a batch that fits."""
    on_gpu = engine == "torch" and hw.cuda
    memory = hw.cuda_memory_bytes if on_gpu else (hw.ram_available_bytes or hw.ram_bytes)
    budget = int(memory * USABLE_FRACTION)
    bf16 = bool(hw.gpus and hw.gpus[0].bf16) if on_gpu else False
    model, batch, why_not_bigger = _fit(hw, on_gpu, budget, 2 if bf16 else 4)
    threads = max(1, hw.cores)
    where = f"{hw.cuda_name or 'GPU'} with {memory / GIB:.0f} GiB" if on_gpu else f"{memory / GIB:.0f} GiB RAM free, CPU"
    reason = f"{hw.cores} physical cores: {threads} threads; {where}: {model.label}"  # the run's batch: its settings
    return Recommendation(threads, model, batch, memory, reason + (f" ({why_not_bigger})" if why_not_bigger else ""))


def _fit(hw: Hardware, on_gpu: bool, budget: int, bytes_per_param: int) -> tuple[ModelChoice, Batch, str]:
    """(model, batch, why no larger model) for the memory budget."""
    fits = [m for m in LARGEST_FIRST[:-1] if needed_bytes(m, BATCHES["gpu" if on_gpu else "cpu"], bytes_per_param) <= budget]
    if on_gpu and fits:
        return fits[0], BATCHES["gpu"], ""
    if fits and hw.cores >= CPU_CORES_FOR_REAL_MODELS:
        return fits[-1], BATCHES["cpu"], ""
    if needed_bytes(BUNDLED, BATCHES["bundled"], 4) > budget:
        return BUNDLED, BATCHES["small"], "little free memory: a smaller batch"
    if fits:
        return BUNDLED, BATCHES["bundled"], (f"{fits[-1].label} fits in memory but needs {CPU_CORES_FOR_REAL_MODELS}+ "
                                             "cores to keep a round on CPU within minutes")
    return BUNDLED, BATCHES["bundled"], f"{QWEN_05B.label} would not fit in memory"
