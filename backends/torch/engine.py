"""The torch engine: a Hugging Face causal LM with a PEFT LoRA adapter, trained with GRPO.

Owns: checking the model folder (always a local folder: the app's resolver turns hub ids into folders),
the tokenizer and its chat template, batched sampling (the decode loop itself is in backends/torch/decode.py),
the tensor work of the round's GRPO update of the LoRA parameters (log-probs through a shared prompt pass,
backward, AdamW over LoRA only; the loop over minibatches is backends/update.py's, the loss
backends/torch/grpo_loss.py's), and the adapter + optimizer files.
CUDA when present (bf16 where supported), else CPU with a fixed thread count.
Must not import swarm_app, and must not import torch, transformers or peft at module level:
`is_available` runs before the engine is chosen (importing all three costs ~4 s).
"""

from __future__ import annotations

import gc
import importlib.util
import json
import logging
import pickle
import random
import warnings
from pathlib import Path

from backends.base import BackendError, Completion, Hardware, Messages, ModelSpec, OnText, Progress, Sampling
from backends.chat import IM_END, check_model_folder, load_tokenizer, model_folder, stop_ids
from backends.grpo_batch import Sequence
from backends.memory_fit import check_fits, parameter_estimate
from backends.streaming import TextPieces
from backends.torch.batching import cache_kwarg, pad, prompt_cache, training_attention
from backends.torch.device import free_memory, pick_device, torch_cuda_build, torch_float32, where_of
from backends.update import GrpoEngine

log = logging.getLogger(__name__)

GENERATE_CHUNK = 64
"""Sequences per decode loop: bounds the KV cache (64 x 600 tokens of a 0.5B model: ~0.9 GB bf16)."""
OPTIMIZER_FILE = "optimizer.pt"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def attach_lora(model, spec: ModelSpec):
    """Wrap `model` in a fresh PEFT LoRA adapter on the spec's target modules that exist in it."""
    import torch
    from peft import LoraConfig, get_peft_model

    linear = {name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)}
    targets = [t for t in spec.lora.target_modules if t in linear]
    if not targets:
        raise BackendError(f"none of the LoRA target modules {list(spec.lora.target_modules)} exist in this model: "
                           f"set lora.target_modules to some of its linear layers ({', '.join(sorted(linear))})")
    lora = spec.lora
    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                        task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        # peft 0.21 calls a method transformers 5 deprecated; nothing for our users to act on.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        torch.manual_seed(0)  # the same fresh adapter on every load: reproducible runs and tests
        wrapped = get_peft_model(model, config)
    from backends.torch.lora_fused import fuse_lora_forward

    fuse_lora_forward(wrapped)
    return wrapped


class TorchBackend(GrpoEngine):
    """One model + LoRA adapter + AdamW; the update's old-policy log-probs as backends/update.py describes.

    With dropout (lora.dropout > 0, or a dropout rate in the model), a train-mode pass is one noisy draw,
    so every sample gets the eval-mode pass and the first step's ratio is not exactly 1.
    """

    name = "torch"
    supports_streaming = True

    def __init__(self) -> None:
        super().__init__()
        self._device = None
        self._own_generator = None
        self._cache_kwarg = "cache"

    @classmethod
    def is_available(cls, hw: Hardware) -> tuple[bool, str]:
        missing = [m for m in ("torch", "transformers", "peft") if importlib.util.find_spec(m) is None]
        if missing:
            return False, f"{', '.join(missing)} not installed (pip install swarm-app installs them)"
        if cls.runs_accelerated(hw):
            return True, f"torch on CUDA ({hw.cuda_name or 'GPU'})"
        if hw.cuda:
            return True, f"torch on CPU: this torch is a CPU build, so the {hw.cuda_name or 'GPU'} goes unused"
        return True, "torch on CPU (no CUDA GPU found)"

    @classmethod
    def runs_accelerated(cls, hw: Hardware) -> bool:
        return hw.cuda and bool(torch_cuda_build())

    def load(self, spec: ModelSpec) -> None:
        import torch
        from transformers import AutoModelForCausalLM, GenerationConfig
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # progress bars on every checkpoint would flood a terminal view
        self.close()
        folder = model_folder(spec.path)
        check_model_folder(folder)
        device, dtype = pick_device(spec.threads, spec.precision, parameter_estimate(folder))
        if device.type == "cuda" and spec.gpu_memory_fraction:
            torch.cuda.set_per_process_memory_fraction(spec.gpu_memory_fraction, device)
        check_fits(folder, 2 if dtype != torch_float32() else 4, free_memory(device), where_of(device))
        tok = load_tokenizer(folder)
        try:
            base = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise BackendError(f"cannot load the model in {folder}: {exc}") from exc
        checkpoint_eos = base.generation_config.eos_token_id
        # Drop the checkpoint's sampling defaults (e.g. top_k 20, repetition penalty): GRPO samples the policy.
        base.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        self._cache_kwarg = cache_kwarg(base)
        self._model = attach_lora(base, spec).to(device).eval()
        self.reuses_first_pass = not has_dropout(self._model)
        self._tok, self._spec, self._device = tok, spec, device
        self._own_generator = None  # made on the model's device at the first unseeded call
        self._end_id = tok.get_vocab().get(IM_END, tok.eos_token_id)
        self._stop_ids = stop_ids(tok, self._end_id, checkpoint_eos)
        self._model_id = spec.reported_id()
        self._optimizer = self._new_optimizer() if spec.trainable else None
        log.info("loaded %s on %s (%s)", self._model_id, device, dtype)

    def _new_optimizer(self):
        import torch

        optim = self._spec.optim
        params = [p for p in self._model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=optim.learning_rate, weight_decay=optim.weight_decay)

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling,
                 progress: Progress | None = None) -> list[list[Completion]]:
        import torch

        model = self._require_model()
        rows = [ids for ids in map(self.encode_prompt, prompts) for _ in range(n)]
        done: list[Completion] = []
        model.eval()
        chunks = range(0, len(rows), GENERATE_CHUNK)
        generator = self.sampling_generator(sampling.seed)
        with torch.inference_mode():
            for k, start in enumerate(chunks):
                steps = _StepReporter(progress, k * sampling.max_new_tokens, len(chunks) * sampling.max_new_tokens)
                chunk = rows[start : start + GENERATE_CHUNK]
                done.extend(map(self._completion, self._generate_ids(chunk, sampling, steps, generator)))
        return [done[i * n : (i + 1) * n] for i in range(len(prompts))]

    def stream(self, messages: Messages, sampling: Sampling, on_text: OnText) -> Completion:
        """One completion, its text handed to `on_text` as the decode loop chooses each token (same tokens as
        generate with the same sampling and seed)."""
        import torch

        from backends.torch.decode import decode

        model = self._require_model()
        pieces = TextPieces(self._tok, self._stop_ids, on_text)
        ids, mask = pad([self.encode_prompt(messages)], self._tok.pad_token_id, left=True, device=self._device)
        model.eval()
        with torch.inference_mode():
            new = decode(model, self._cache_kwarg, ids, mask, sampling, self._stop_ids,
                         on_token=lambda row, token: pieces.add(token),
                         generator=self.sampling_generator(sampling.seed))[0]
        completion = self._completion(new)
        pieces.finish(completion.text)
        return completion

    def sampling_generator(self, seed: int | None):
        """This engine's generator for one generate() call: seeded with `seed` when given, else the engine's own
        stream (seeded at random on load). Never torch's global generator, which every engine of the process
        would share: two nodes in one process drew from each other's stream and no run could be repeated."""
        import torch

        from backends.torch.decode import sampling_generator

        if self._own_generator is None:
            self._own_generator = torch.Generator(device=self._device)
            self._own_generator.manual_seed(random.SystemRandom().randrange(2**63))
        return sampling_generator(seed, self._device, self._own_generator)

    def _generate_ids(self, rows: list[list[int]], sampling: Sampling, steps: "_StepReporter",
                      generator=None) -> list[list[int]]:
        """New token ids per row, each up to and including its first stop token (see backends/torch/decode.py)."""
        from backends.torch.decode import decode

        ids, mask = pad(rows, self._tok.pad_token_id, left=True, device=self._device)
        return decode(self._model, self._cache_kwarg, ids, mask, sampling, self._stop_ids, steps.step, generator=generator)

    def _token_logps(self, seqs: list[Sequence]):
        """Log-probs of every completion token of `seqs` (which share one prompt), flat, sample after sample.

        The prompt but its last token goes through the model once; its KV cache is repeated for every
        completion, and gradients flow back through it. At L completions per prompt this does the prompt's
        work once instead of L times (prompts are most of a round's tokens: ~200 vs ~15 on the easy preset).
        """
        import torch

        from backends.torch.logprobs import token_logprobs

        head = seqs[0].ids[: seqs[0].prompt_len - 1]
        if any(s.ids[: s.prompt_len] != seqs[0].ids[: seqs[0].prompt_len] for s in seqs):
            raise ValueError("_token_logps needs sequences with one shared prompt")
        tails, mask = pad([s.ids[len(head) :] for s in seqs], self._tok.pad_token_id, left=False, device=self._device)
        with training_attention(self._model, self._device, len(seqs), tails.shape[1], len(head) + tails.shape[1]):
            cache = None
            if head:
                head_ids = torch.tensor([head], device=self._device)
                cache = prompt_cache(self._model, self._cache_kwarg, head_ids, torch.ones_like(head_ids), [len(seqs)])
                mask = torch.cat([mask.new_ones((len(seqs), len(head))), mask], dim=1)
            positions = torch.arange(len(head), len(head) + tails.shape[1], device=self._device).expand(len(seqs), -1)
            out = self._model(input_ids=tails, attention_mask=mask, position_ids=positions,
                              use_cache=cache is not None, **{self._cache_kwarg: cache})
        # Position k predicts token k + 1; the last position predicts nothing (a dummy target, dropped).
        targets = torch.nn.functional.pad(tails[:, 1:], (0, 1))
        logp = token_logprobs(out.logits, targets)[:, :-1]
        # A tail is the prompt's last token + the completion: positions 0 .. n_completion - 1 predict the completion.
        n_completion = torch.tensor([s.n_completion for s in seqs], device=self._device).unsqueeze(1)
        return logp[torch.arange(logp.shape[1], device=self._device).unsqueeze(0) < n_completion]

    def _vocab_size(self) -> int:
        return self._model.config.get_text_config().vocab_size

    def _old_logps(self, seqs: list[Sequence]) -> list:
        """Per-sample log-probs under the policy as the round starts (computed once, no grad)."""
        import torch

        self._model.eval()
        out: list = [None] * len(seqs)
        with torch.no_grad():
            for group in self._groups(seqs):
                flat = self._token_logps([seqs[i] for i in group])
                for i, logp in zip(group, flat.split([seqs[i].n_completion for i in group])):
                    out[i] = logp
        return out

    def _group_gradients(self, seqs: list[Sequence], old: list, advantages: list[float], total: int):
        """One pass and its backward: gradients accumulate in the LoRA parameters (see GrpoEngine)."""
        import torch

        from backends.torch.grpo_loss import clip_cut, grpo_loss

        optim = self._spec.optim
        lengths = [s.n_completion for s in seqs]
        logp = self._token_logps(seqs)
        own = list(logp.detach().split(lengths))
        old_logp = torch.cat([mine if theirs is None else theirs for theirs, mine in zip(old, own)])
        adv = torch.cat([torch.full((s.n_completion,), a) for s, a in zip(seqs, advantages)]).to(logp.device)
        loss, _ = grpo_loss(logp, old_logp, adv, clip_low=optim.clip_low, clip_high=optim.clip_high, num_tokens=total)
        loss.backward()
        with torch.no_grad():  # the loss's own rule on its own ratio, counted per sample
            cut = clip_cut(torch.exp(logp.detach() - old_logp), adv, optim.clip_low, optim.clip_high)
        return loss.item(), [int(c.sum()) for c in cut.split(lengths)], own, None

    def _trainable(self) -> list:
        return [p for group in self._optimizer.param_groups for p in group["params"]]

    def _clip_gradients(self, grads, max_norm: float):
        import torch

        return grads, float(torch.nn.utils.clip_grad_norm_(self._trainable(), max_norm))

    def _apply_gradients(self, grads) -> None:
        self._optimizer.step()

    def _zero_gradients(self) -> None:
        if self._optimizer is not None:
            self._optimizer.zero_grad(set_to_none=True)
        else:  # loaded with trainable=False: loss_and_gradients still fills the parameters' .grad
            self._model.zero_grad(set_to_none=True)

    def _named_gradients(self, grads) -> dict:
        return {name.replace(".default", ""): p.grad.detach().float().cpu().numpy().copy()
                for name, p in self._model.named_parameters() if p.requires_grad and p.grad is not None}

    def save_adapter(self, folder: Path) -> None:
        import torch

        model = self._require_model()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(folder))  # adapter_config.json + adapter_model.safetensors
        if self._optimizer is not None:
            torch.save(self._optimizer.state_dict(), folder / OPTIMIZER_FILE)

    def load_adapter(self, folder: Path) -> None:
        from peft.utils import get_peft_model_state_dict, load_peft_weights, set_peft_model_state_dict
        from safetensors import SafetensorError

        model = self._require_model()
        folder = Path(folder)
        self._check_adapter_config(folder)
        try:
            state = load_peft_weights(str(folder), device=str(self._device))
        except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
            raise BackendError(f"cannot read the adapter weights in {folder}: {exc}") from exc
        expected = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(model).items()}
        found = {k: tuple(v.shape) for k, v in state.items()}
        if found != expected:
            raise BackendError(f"the adapter in {folder} does not fit this model and LoRA settings ({len(found)} "
                               f"tensors, {len(expected)} expected): start a fresh adapter or use matching settings")
        optimizer = self._read_optimizer(folder / OPTIMIZER_FILE)  # before any weight changes: all or nothing
        set_peft_model_state_dict(model, state)
        self._optimizer = optimizer
        log.info("loaded adapter from %s", folder)

    def _check_adapter_config(self, folder: Path) -> None:
        config_file = folder / ADAPTER_CONFIG
        if not config_file.is_file() or not any((folder / name).is_file() for name in ADAPTER_WEIGHTS):
            raise BackendError(f"{folder} is not a LoRA adapter folder (it needs {ADAPTER_CONFIG} and "
                               f"{ADAPTER_WEIGHTS[0]}): point to a folder written by save_adapter")
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BackendError(f"cannot read {config_file}: {exc}") from exc
        lora = self._spec.lora
        if (config.get("r"), config.get("lora_alpha")) != (lora.rank, lora.alpha):
            raise BackendError(f"the adapter in {folder} has rank {config.get('r')}, alpha {config.get('lora_alpha')}; "
                               f"this model uses rank {lora.rank}, alpha {lora.alpha}: use matching LoRA settings")

    def _read_optimizer(self, path: Path):
        """A fresh optimizer (stale moments must not carry over to other weights) with `path`'s state;
        None when the model is not trained (eval)."""
        import torch

        if self._optimizer is None:
            return None
        if not path.is_file():  # resetting Adam's moments silently would change training without a word
            raise BackendError(f"the optimizer state {path.name} is missing from {path.parent}")
        optimizer = self._new_optimizer()
        try:
            optimizer.load_state_dict(torch.load(path, map_location=self._device, weights_only=True))
        except (OSError, RuntimeError, ValueError, KeyError, EOFError, pickle.UnpicklingError) as exc:
            raise BackendError(f"the optimizer state {path} is unreadable ({exc})") from exc
        return optimizer

    def device(self) -> str:
        return str(self._device) if self._device is not None else "cpu"

    def set_threads(self, threads: int) -> bool:
        """torch's intra-op pool (process-wide); on a GPU the count only matters for the few CPU-side ops."""
        import torch

        torch.set_num_threads(max(1, threads))
        return True

    def memory(self) -> int:
        if self._model is None:
            return 0
        sizes = [(p.numel() * p.element_size(), p.requires_grad) for p in self._model.parameters()]
        moments = 2 if self._optimizer is not None else 0  # AdamW keeps two per trainable parameter
        return sum(size * (1 + moments * trainable) for size, trainable in sizes)

    def close(self) -> None:
        if self._model is None:
            return
        on_cuda = self._device is not None and self._device.type == "cuda"
        self._model = self._tok = self._optimizer = None
        gc.collect()
        if on_cuda:
            import torch

            torch.cuda.empty_cache()


class _StepReporter:
    """Turns the decode steps of one chunk of rows into `progress(done, total)` calls over the whole call;
    a Cancelled raised by `progress` ends decoding between two steps."""

    def __init__(self, progress: Progress | None, offset: int, total: int) -> None:
        self.progress, self.offset, self.total = progress, offset, total

    def step(self, done: int) -> None:
        if self.progress is not None:
            self.progress(self.offset + done, self.total)


def has_dropout(model) -> bool:
    """Whether a train-mode pass through `model` is random: a dropout layer with p > 0 (LoRA's included) or
    a dropout rate in its config (attention dropout is applied as a rate, not by a layer)."""
    import torch

    if any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        return True
    config = model.config.get_text_config().to_dict()
    return any(isinstance(v, (int, float)) and v > 0 for k, v in config.items() if k.endswith(("dropout", "pdrop")))
