"""The llama.cpp engine: generation in llama.cpp from a GGUF of the base model plus the LoRA adapter as a
GGUF adapter; the GRPO update in torch on the same weights (backends/torch/engine.py's TorchBackend).

Owns: the GGUF of the base model (the one shipped in the model folder when its recorded content key
matches, else converted once by gguf_export and cached under `ModelSpec.cache_dir` keyed by the model's
content hash; F16 for small models, Q8_0 above ~134 M parameters: `gguf_export.weight_type_for`), and
the adapter swap after every update and adapter load: export the PEFT adapter to GGUF (~5 ms),
llama_adapter_lora_init + llama_set_adapters_lora. Generation is batched (backends/llama_cpp/batch.py: many
sequences per llama_decode, each prompt evaluated once for its L copies); every call starts from an
empty KV cache, so nothing computed under an old adapter is reused (it would be off by ~1.4 in the
logits). Prompts are tokenized by the HF tokenizer (the torch side's), so both sides see the same ids.
Loss, log-probs and adapter files are torch's.

Loaded with `trainable=False` (chat, eval) the engine has no torch half: the tokenizer, the stop ids and the
adapter's weights are read without torch (backends/llama_cpp/prompt_text.py), greedy tokens are chosen in
numpy, and torch is imported only for a sampled (temperature > 0) answer. That takes `swarm chat --prompt`
from ~3.4 s to ~1.3 s to its first token on 2 cores.
Must not import swarm_app, and imports llama_cpp, gguf and torch only in `load` and later.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import random
import tempfile
from pathlib import Path

from backends.base import (
    Backend,
    BackendError,
    Completion,
    Hardware,
    Messages,
    ModelSpec,
    OnText,
    Sampling,
    TrainSample,
    TrainStats,
)
from backends.llama_cpp.batch import BatchedDecoder
from backends.llama_cpp.prompt_text import PromptText, read_adapter
from backends.streaming import TextPieces
from backends.torch.engine import TorchBackend

log = logging.getLogger(__name__)

REQUIRED = ("llama_cpp", "gguf", "torch", "transformers", "peft")


class LlamaCppBackend(Backend):
    name = "llama_cpp"
    adapter_format = "peft"  # the torch side writes and reads the adapter files
    supports_streaming = True

    def __init__(self) -> None:
        self._trainer = TorchBackend()
        self._text: TorchBackend | PromptText | None = None
        """Where prompts are encoded and answers decoded: the torch half when trainable, else PromptText."""
        self._adapter_state = None
        """Untrainable: the loaded adapter's (weights, alpha); None: the base model."""
        self._decoder: BatchedDecoder | None = None
        self._own_generator = None
        self.base_gguf: Path | None = None
        """The base model's GGUF that generation runs on (set by load)."""
        self._adapter = None
        self._swap_dir: tempfile.TemporaryDirectory | None = None

    @classmethod
    def is_available(cls, hw: Hardware) -> tuple[bool, str]:
        missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
        if missing:
            return False, f"{', '.join(missing)} not installed (pip install \"swarm-app[llamacpp]\")"
        return True, "llama.cpp for generation, torch for the LoRA update (CPU)"

    def load(self, spec: ModelSpec) -> None:
        from backends import gguf_export

        self.close()
        folder = Path(spec.path).expanduser()
        if not folder.is_dir():
            raise BackendError(f"model folder {folder} does not exist: check the path (resolve hub ids first)")
        config = gguf_export.read_config(folder)  # refuses what cannot convert before torch loads anything
        if spec.trainable:
            self._trainer.load(spec)
            self._text = self._trainer
        else:
            self._text = PromptText(spec)
        self._config, self._spec = config, spec
        self.base_gguf = self._base_gguf(folder, spec, gguf_export.weight_type_for(config))
        self._decoder = BatchedDecoder(self.base_gguf, spec.threads)
        self._swap_dir = tempfile.TemporaryDirectory(prefix="swarm-lora-")
        self._swap_adapter()
        log.info("llama.cpp: %s from %s", self.model_id, self.base_gguf)

    @staticmethod
    def _base_gguf(folder: Path, spec: ModelSpec, weights: str) -> Path:
        """The shipped GGUF (`<folder>/model.<weights>.gguf`) if it was made from these files, else
        the cached conversion, converting first when there is none."""
        from backends import gguf_export

        key = gguf_export.content_key(folder)
        shipped = folder / f"model.{weights}.gguf"
        if shipped.is_file() and gguf_export.recorded_content_key(shipped) == key:
            return shipped
        cache = Path(spec.cache_dir) if spec.cache_dir else Path(tempfile.gettempdir()) / "swarm-app-gguf"
        target = cache / "gguf" / f"{folder.resolve().name}-{key}.{weights}.gguf"
        if not target.is_file():
            log.info("llama.cpp: converting %s to GGUF (%s) once, into %s", folder.name, weights, target.parent)
            target.parent.mkdir(parents=True, exist_ok=True)
            gguf_export.convert_model(folder, target, weights)
        return target

    def _require_decoder(self) -> BatchedDecoder:
        if self._decoder is None:
            raise BackendError("no model loaded: call load() first")
        return self._decoder

    @property
    def model_id(self) -> str:
        if self._text is None:
            raise BackendError("no model loaded: call load() first")
        return self._text.model_id

    def _require_trainable(self) -> TorchBackend:
        self._require_decoder()
        if self._text is not self._trainer:
            raise BackendError("this model was loaded with trainable=False: load it again to train")
        return self._trainer

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling, progress=None,
                 on_token=None) -> list[list[Completion]]:
        """`on_token(token)` hears each chosen token of a one-row call as it is chosen (stream)."""
        decoder = self._require_decoder()
        rows = [ids for ids in map(self._text.encode_prompt, prompts) for _ in range(n)]
        chooser = self._chooser(sampling)

        def choose(logits) -> list[int]:
            chosen = chooser(logits)
            if on_token is not None:
                on_token(chosen[0])
            return chosen

        done = decoder.generate(rows, choose, sampling.max_new_tokens, set(self._text.stop_ids), progress)
        tok = self._text.tokenizer
        completions = [Completion(tok.decode(new, skip_special_tokens=True), len(new) + stopped) for new, stopped in done]
        return [completions[i * n : (i + 1) * n] for i in range(len(prompts))]

    def stream(self, messages: Messages, sampling: Sampling, on_text: OnText) -> Completion:
        """One completion, its text handed on as llama.cpp decodes each token (see backends/streaming.py)."""
        pieces = TextPieces(self._text.tokenizer, self._text.stop_ids, on_text)
        completion = self.generate([messages], 1, sampling, on_token=pieces.add)[0][0]
        pieces.finish(completion.text)
        return completion

    def _chooser(self, sampling: Sampling):
        """llama.cpp's logits (rows x vocab, numpy) -> one token per row. Greedy: numpy's argmax, which picks
        the first of equal maxima as torch.argmax does (no torch import for an engine that only generates).
        Sampled: the torch engine's chooser and generator (its own, seeded per call): both engines sample alike."""
        if sampling.temperature <= 0:
            return lambda logits: logits.argmax(axis=-1).tolist()
        import torch

        from backends.torch.decode import token_chooser

        chooser = token_chooser(sampling, self._sampling_generator(sampling.seed))

        def choose(logits) -> list[int]:
            with torch.inference_mode():
                return chooser(torch.from_numpy(logits)).tolist()
        return choose

    def _sampling_generator(self, seed: int | None):
        """The engine's own torch generator on the CPU (llama.cpp's logits come back as CPU arrays): seeded per
        call when `seed` is given, else one stream seeded at random; never torch's global one."""
        import torch

        from backends.torch.decode import sampling_generator

        if self._own_generator is None:
            self._own_generator = torch.Generator(device="cpu")
            self._own_generator.manual_seed(random.SystemRandom().randrange(2**63))
        return sampling_generator(seed, "cpu", self._own_generator)

    def train_step(self, batch: list[TrainSample], progress=None) -> TrainStats:
        trainer = self._require_trainable()
        stats = trainer.train_step(batch) if progress is None else trainer.train_step(batch, progress)
        self._swap_adapter()
        return stats

    def token_logprobs(self, batch: list[TrainSample]) -> list[list[float]]:
        return self._require_trainable().token_logprobs(batch)

    def save_adapter(self, folder: Path) -> None:
        self._require_trainable().save_adapter(folder)

    def load_adapter(self, folder: Path) -> None:
        self._require_decoder()
        if self._text is self._trainer:
            self._trainer.load_adapter(folder)
        else:
            self._adapter_state = read_adapter(folder)
        self._swap_adapter()

    def export_adapter_gguf(self, out: Path) -> Path:
        """The current adapter as a GGUF LoRA adapter at `out`."""
        from backends import gguf_export

        if self._text is self._trainer:
            from peft.utils import get_peft_model_state_dict

            model = self._trainer.model
            state = {k: v.detach().float().cpu().numpy() for k, v in get_peft_model_state_dict(model).items()}
            return gguf_export.export_lora(state, self._config, self._spec.lora.alpha, out)
        if self._adapter_state is None:
            raise BackendError("no adapter loaded: an engine loaded with trainable=False has only the base model")
        state, alpha = self._adapter_state
        return gguf_export.export_lora(state, self._config, alpha, out)

    def _swap_adapter(self) -> None:
        """Export the adapter and hand it to the decoder in place of the previous one. An untrainable engine
        before any load_adapter runs the base model alone (a fresh adapter's B matrices are zero: the same)."""
        import llama_cpp

        if self._text is not self._trainer and self._adapter_state is None:
            return
        path = self.export_adapter_gguf(Path(self._swap_dir.name) / f"adapter-{os.getpid()}.gguf")
        adapter = llama_cpp.llama_adapter_lora_init(self._decoder.model, str(path).encode())
        if not adapter:
            raise BackendError(f"llama.cpp refused the exported adapter {path}: use --backend torch and report this")
        self._decoder.set_adapter(adapter)
        self._free_adapter()
        self._adapter = adapter

    def _free_adapter(self) -> None:
        if self._adapter is not None:
            import llama_cpp

            llama_cpp.llama_adapter_lora_free(self._adapter)
            self._adapter = None

    def set_threads(self, threads: int) -> bool:
        """llama.cpp's decode threads and the torch update's."""
        if self._text is self._trainer:
            self._trainer.set_threads(threads)
        if self._decoder is not None:
            self._decoder.set_threads(threads)
        return True

    def memory(self) -> int:
        return self._trainer.memory() + (self._decoder.model_size() if self._decoder is not None else 0)

    def close(self) -> None:
        if self._decoder is not None:
            self._decoder.set_adapter(None)
            self._free_adapter()
            self._decoder.close()
            self._decoder = None
        if self._swap_dir is not None:
            self._swap_dir.cleanup()
            self._swap_dir = None
        self._trainer.close()
        self._text = self._adapter_state = None
