"""The backend contract: what every engine (torch, mlx, llama.cpp, fake) offers the trainer.

A backend owns one model, its LoRA adapter and its optimizer. It renders chat prompts with the model's
own chat template, samples completions, and applies one round's GRPO update given completions and
their advantages (the trainer computes rewards and advantages; the backend never sees a reward).
Capability flags say what an engine can do, where the registry chooses by it; `is_available` must be cheap
(no heavy imports). Every engine's generate lets a progress callback stop it with Cancelled (see Progress).
`stream` (one completion, its text handed out as it is decoded) is optional: the base class falls back on
generate and hands the whole text out at once; `supports_streaming` says which an engine does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar

Messages = list[dict[str, str]]
"""A chat prompt: [{"role": "system"|"user"|"assistant", "content": ...}, ...]."""


class BackendError(Exception):
    """A model or adapter that an engine cannot use; the message names the problem and the fix."""


class EngineBroken(BackendError):
    """The engine is installed but does not work here (an import error, a missing shared library):
    another engine may still run the same model, so `auto` falls back to the next one."""


class Cancelled(Exception):
    """Raised by a `Progress` callback to stop generation between decode steps; the engine lets it
    propagate and keeps no partial state (nothing it generated so far is returned)."""


Progress = Callable[[int, int], None]
"""`progress(done, total)`: called by generate between decode steps (tokens) and by train_step after
each optimizer step. In generate it may raise Cancelled; in train_step it only reports (an update that
stopped half way would leave the adapter between two states)."""

OnText = Callable[[str], None]
"""`on_text(piece)`: the next piece of a completion's text as `stream` decodes it (the pieces join into the
completion's text). It may raise Cancelled to stop decoding, as a Progress callback may."""


@dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU as the driver reports it."""

    name: str
    memory_bytes: int
    compute_capability: str = ""
    """"8.6" style; "" when the driver does not say."""
    bf16: bool = False
    """Native bfloat16 (compute capability 8.0 and up)."""


@dataclass(frozen=True)
class Hardware:
    """What detection found. Filled by the app; backends only read it. The cuda_* fields describe the
    first GPU of `gpus` (kept for engines written before `gpus`)."""

    cuda: bool = False
    cuda_name: str = ""
    cuda_memory_bytes: int = 0
    apple_silicon: bool = False
    ram_bytes: int = 0
    cpu_count: int = 1
    """Logical CPUs."""
    physical_cores: int = 0
    """0: unknown (use cpu_count)."""
    gpus: tuple[Gpu, ...] = ()
    cuda_driver: str = ""
    apple_chip: str = ""
    mlx_installed: bool = False
    simd: tuple[str, ...] = ()
    """CPU vector extensions found, e.g. ("avx2", "avx512f") or ("neon",)."""
    ram_available_bytes: int = 0
    disk_free_bytes: int = 0
    system: str = ""
    """platform.system(): "Linux", "Darwin", "Windows"."""
    machine: str = ""
    """platform.machine(): "x86_64", "arm64", "AMD64", ..."""

    @property
    def cores(self) -> int:
        """Physical cores when known, else logical CPUs."""
        return self.physical_cores or self.cpu_count


@dataclass(frozen=True)
class LoraConfig:
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class OptimConfig:
    """One round's GRPO update: see swarm_app/training/grpo.py for the exact variant."""

    learning_rate: float = 3e-4
    weight_decay: float = 0.0
    epochs: int = 1
    minibatches: int = 2
    clip_low: float = 0.2
    clip_high: float = 0.28
    max_grad_norm: float = 1.0


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int = 48
    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    seed: int | None = None


@dataclass(frozen=True)
class Completion:
    text: str
    n_tokens: int


@dataclass(frozen=True)
class TrainSample:
    """One completion to learn from: its prompt, its text and its group-normalized advantage."""

    messages: Messages
    completion: str
    advantage: float


@dataclass(frozen=True)
class SampleStats:
    """One sample of a round's update, so a caller can compare kinds of samples afterwards (a node: its own
    completions against peers'). Figures the update computes anyway: no extra pass."""

    tokens: int
    """Its completion tokens, the end token included."""
    old_logp: float | None
    """The sum of those tokens' log-probs under the policy as the round started (the ratio's old log-probs);
    None when it had no pass (advantage 0)."""
    clipped: int = 0
    """Its tokens where the clip cut the gradient, summed over the update's steps."""
    trained_tokens: int = 0
    """Its tokens summed over the steps it was in (tokens x epochs): the denominator of its clipped share."""


@dataclass(frozen=True)
class TrainStats:
    loss: float
    tokens: int
    clipped_fraction: float = 0.0
    grad_norm: float = 0.0
    steps: int = 0
    samples: tuple[SampleStats, ...] = ()
    """Per sample of the batch, in its order; empty where an engine does not report them (fake, llama.cpp
    reports its torch trainer's)."""


@dataclass(frozen=True)
class ModelSpec:
    """Where the model lives and how to adapt it.

    `path` is a local model folder (the app resolves hub ids and the bundled model before an engine
    sees it); `model_id` is the name the engine reports back (empty: the folder's name).
    """

    path: str
    lora: LoraConfig = field(default_factory=LoraConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    threads: int = 1
    trainable: bool = True
    model_id: str = ""
    cache_dir: str = ""
    """Where an engine may keep converted models (the app passes its user cache dir; empty: a temp dir)."""
    precision: str = "auto"
    """Number format of the model's weights in torch: "fp32", "bf16" or "auto" (see
    backends/torch/device.py: pick_device). The LoRA weights and their optimizer stay fp32."""
    gpu_memory_fraction: float = 0.0
    """Most of the GPU's memory the engine may allocate (CUDA; 0: no cap): the owner's other programs keep the rest."""

    def reported_id(self) -> str:
        """The model id to publish: `model_id`, else the folder's name."""
        return self.model_id or Path(self.path).expanduser().resolve().name


class Backend(ABC):
    name: ClassVar[str]
    supports_streaming: ClassVar[bool] = False
    """True where `stream` hands text out token by token; False: the whole completion at once, when done."""
    adapter_format: ClassVar[str] = "peft"
    """What save_adapter writes: "peft" (adapter_config.json + adapter_model.safetensors) or the engine's
    own format. A checkpoint resumes only on an engine with the same format."""

    @classmethod
    def runs_accelerated(cls, hw: Hardware) -> bool:
        """True when this engine would use an accelerator here (CUDA, Apple GPU); cheap, like is_available."""
        return False

    @classmethod
    @abstractmethod
    def is_available(cls, hw: Hardware) -> tuple[bool, str]:
        """(usable, why) without importing the engine's heavy modules."""

    @abstractmethod
    def load(self, spec: ModelSpec) -> None:
        """Load the base model and attach a fresh LoRA adapter. Raises BackendError."""

    @property
    @abstractmethod
    def model_id(self) -> str:
        """A short, stable name of the loaded base model (shared with peers as text)."""

    @abstractmethod
    def generate(self, prompts: list[Messages], n: int, sampling: Sampling,
                 progress: Progress | None = None) -> list[list[Completion]]:
        """`n` completions for each prompt, in prompt order."""

    def stream(self, messages: Messages, sampling: Sampling, on_text: OnText) -> Completion:
        """One completion of `messages`, its text handed to `on_text` piece by piece as it is decoded (chat).
        This fallback, for engines without streaming, generates it whole and hands it out in one piece."""
        completion = self.generate([messages], 1, sampling)[0][0]
        if completion.text:
            on_text(completion.text)
        return completion

    @abstractmethod
    def train_step(self, batch: list[TrainSample], progress: Progress | None = None) -> TrainStats:
        """One round's GRPO update of the LoRA parameters (all epochs and minibatches)."""

    @abstractmethod
    def save_adapter(self, folder: Path) -> None:
        """Write the adapter (PEFT format where the engine allows) and the optimizer state."""

    @abstractmethod
    def load_adapter(self, folder: Path) -> None:
        """Load an adapter written by save_adapter (and its optimizer state when present)."""

    def token_logprobs(self, batch: list[TrainSample]) -> list[list[float]]:
        """Log-probs of each sample's completion tokens under the current policy (for tests and checks)."""
        raise BackendError(f"the {self.name} engine cannot score completions")

    def memory(self) -> int:
        """Bytes the engine holds (model, adapter, optimizer), best effort."""
        return 0

    def device(self) -> str:
        """Where the engine computes ("cpu", "cuda:0", ...), for the views."""
        return "cpu"

    def set_threads(self, threads: int) -> bool:
        """Compute on `threads` CPU threads from the next call on (the caller measures which count is fastest
        now). False where the engine cannot change it while loaded: then its load-time count stays."""
        return False

    def close(self) -> None:
        """Release the model."""
