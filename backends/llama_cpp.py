"""The llama.cpp engine: generation in llama.cpp from a GGUF of the base model plus the LoRA adapter as a
GGUF adapter; the GRPO update in torch on the same weights (backends/torch_lora.py's TorchBackend).

Owns: the GGUF of the base model (converted once by gguf_export, cached under `ModelSpec.cache_dir`
keyed by the model's content hash), the llama.cpp context (F32 KV cache: the default F16 one is off by
~1e-2 in the logits), sampling from it, and the adapter swap after every update and adapter load:
export the PEFT adapter to GGUF (~5 ms), llama_adapter_lora_init + llama_set_adapters_lora, then
reset() so no KV cache computed under the old adapter is reused (it would be off by ~1.4 in the logits).
Prompts are tokenized by the HF tokenizer (the torch side's), so both sides see the same ids.
Generation runs one sequence at a time through llama-cpp-python's `Llama.generate`; the L completions
of a prompt reuse its KV cache (prefix match). Loss, log-probs and adapter files are torch's.
Must not import swarm_app, and imports llama_cpp, gguf and torch only in `load`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import random
import tempfile
from pathlib import Path

from backends.base import Backend, BackendError, Completion, Hardware, Messages, ModelSpec, Sampling
from backends.base import TrainSample, TrainStats
from backends.torch_lora import TorchBackend

log = logging.getLogger(__name__)

REQUIRED = ("llama_cpp", "gguf", "torch", "transformers", "peft")
F32 = 0
"""ggml type id of float32, for the KV cache."""


class LlamaCppBackend(Backend):
    name = "llama_cpp"
    adapter_format = "peft"  # the torch side writes and reads the adapter files

    def __init__(self) -> None:
        self._trainer = TorchBackend()
        self._llm = None
        self._adapter = None
        self._swap_dir: tempfile.TemporaryDirectory | None = None
        self._draws = random.Random()

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
        self._trainer.load(spec)
        self._config, self._spec = config, spec
        base = self._base_gguf(folder, spec)
        self._llm = self._open(base, spec)
        self._swap_dir = tempfile.TemporaryDirectory(prefix="swarm-lora-")
        self._swap_adapter()
        log.info("llama.cpp: %s from %s", self.model_id, base)

    @staticmethod
    def _base_gguf(folder: Path, spec: ModelSpec) -> Path:
        from backends import gguf_export

        cache = Path(spec.cache_dir) if spec.cache_dir else Path(tempfile.gettempdir()) / "swarm-app-gguf"
        target = cache / "gguf" / f"{folder.resolve().name}-{gguf_export.content_key(folder)}.f32.gguf"
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            gguf_export.convert_model(folder, target)
        return target

    @staticmethod
    def _open(path: Path, spec: ModelSpec):
        from llama_cpp import Llama

        threads = max(1, spec.threads)
        try:
            return Llama(str(path), n_ctx=0, n_threads=threads, n_threads_batch=threads, type_k=F32, type_v=F32,
                         verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"llama.cpp cannot load {path}: {exc}; delete the file to convert again, "
                               "or use --backend torch") from exc

    def _require_llm(self):
        if self._llm is None:
            raise BackendError("no model loaded: call load() first")
        return self._llm

    @property
    def model_id(self) -> str:
        return self._trainer.model_id

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling, progress=None) -> list[list[Completion]]:
        llm = self._require_llm()
        seeds = random.Random(sampling.seed) if sampling.seed is not None else self._draws
        out = []
        for done, messages in enumerate(prompts, 1):
            ids = self._trainer._encode_prompt(messages)
            out.append([self._complete(llm, ids, sampling, seeds.randrange(2**31)) for _ in range(n)])
            if progress is not None:
                progress(done, len(prompts))
        return out

    def _complete(self, llm, ids: list[int], sampling: Sampling, seed: int) -> Completion:
        llm.set_seed(seed)
        stops, new = set(self._trainer._stop_ids), []
        greedy = sampling.temperature == 0
        # top_k 0 and min_p 0: sample from the whole distribution, as the torch engine does.
        for token in llm.generate(ids, temp=0.0 if greedy else sampling.temperature, top_p=1.0 if greedy else sampling.top_p,
                                  top_k=0, min_p=0.0, repeat_penalty=1.0, reset=True):
            if token in stops:
                return Completion(self._trainer._tok.decode(new, skip_special_tokens=True), len(new) + 1)
            new.append(token)
            if len(new) >= sampling.max_new_tokens:
                break
        return Completion(self._trainer._tok.decode(new, skip_special_tokens=True), len(new))

    def train_step(self, batch: list[TrainSample], progress=None) -> TrainStats:
        self._require_llm()
        stats = self._trainer.train_step(batch) if progress is None else self._trainer.train_step(batch, progress)
        self._swap_adapter()
        return stats

    def token_logprobs(self, batch: list[TrainSample]) -> list[list[float]]:
        return self._trainer.token_logprobs(batch)

    def save_adapter(self, folder: Path) -> None:
        self._trainer.save_adapter(folder)

    def load_adapter(self, folder: Path) -> None:
        self._require_llm()
        self._trainer.load_adapter(folder)
        self._swap_adapter()

    def export_adapter_gguf(self, out: Path) -> Path:
        """The current adapter as a GGUF LoRA adapter at `out` (what `swarm export --gguf` writes)."""
        from peft.utils import get_peft_model_state_dict

        from backends import gguf_export

        state = {k: v.detach().float().cpu().numpy() for k, v in get_peft_model_state_dict(self._trainer._model).items()}
        return gguf_export.export_lora(state, self._config, self._spec.lora.alpha, out)

    def _swap_adapter(self) -> None:
        """Export the torch adapter, hand it to the context in place of the previous one, drop the KV cache."""
        import llama_cpp

        path = self.export_adapter_gguf(Path(self._swap_dir.name) / f"adapter-{os.getpid()}.gguf")
        adapter = llama_cpp.llama_adapter_lora_init(self._llm._model.model, str(path).encode())
        if not adapter:
            raise BackendError(f"llama.cpp refused the exported adapter {path}: use --backend torch and report this")
        adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(adapter)
        scales = (llama_cpp.ctypes.c_float * 1)(1.0)
        if llama_cpp.llama_set_adapters_lora(self._llm._ctx.ctx, adapters, 1, scales) != 0:
            raise BackendError("llama.cpp could not attach the adapter: use --backend torch and report this")
        self._free_adapter()
        self._adapter = adapter
        self._llm.reset()

    def _free_adapter(self) -> None:
        if self._adapter is not None:
            import llama_cpp

            llama_cpp.llama_adapter_lora_free(self._adapter)
            self._adapter = None

    def memory(self) -> int:
        return self._trainer.memory() + (self._llm.model_size() if hasattr(self._llm, "model_size") else 0)

    def close(self) -> None:
        if self._llm is not None:
            import llama_cpp

            llama_cpp.llama_set_adapters_lora(self._llm._ctx.ctx, None, 0, None)
            self._free_adapter()
            self._llm.close()
            self._llm = None
        if self._swap_dir is not None:
            self._swap_dir.cleanup()
            self._swap_dir = None
        self._trainer.close()
