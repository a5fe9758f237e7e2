"""The MLX engine (Apple silicon; CPU elsewhere): mlx-lm's model with mlx-lm's LoRA layers, trained with GRPO.

Owns: loading the HF model folder with mlx-lm (with the config fixes it needs: transformers 5 keeps the
RoPE base only under `rope_parameters`, which mlx-lm ignores, so logits were off by 2.1), the tokenizer
and chat template (the same HF fast tokenizer and stop ids as the torch engine, so both see the same
ids), batched sampling from a KV cache computed once per prompt and repeated for its n completions,
the tensor work of the round's GRPO update (loss in backends/mlx/grpo_loss.py, `nn.value_and_grad`,
global-norm clipping, AdamW with torch's bias correction; the loop over minibatches is backends/update.py's,
the same as torch's), and the adapter in mlx-lm's format (adapters.safetensors + adapter_config.json,
readable by `mlx_lm.generate --adapter-path`) with the optimizer state (optimizer.safetensors), whose files
backends/mlx/adapter.py reads and writes; backends/mlx/decode.py holds the KV-cache prefill and the token
choice. backends/adapter_convert.py moves adapters between this format and PEFT.
Differs from torch on purpose only in the fresh adapter's random A (mlx's generator; B is zero, so the
fresh model is the same) and in sampling (mlx's generator).
Must not import swarm_app, and must not import mlx or mlx_lm at module level (`is_available` runs first).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import random
from pathlib import Path

from backends import adapter_convert as convert
from backends.base import BackendError, Completion, Hardware, Messages, ModelSpec, Progress, Sampling
from backends.chat import IM_END, check_model_folder, load_tokenizer, model_folder, stop_ids
from backends.grpo_batch import Sequence
from backends.mlx import adapter as mlx_adapter
from backends.mlx import decode as mlx_decode
from backends.update import GrpoEngine

log = logging.getLogger(__name__)

REQUIRED = ("mlx", "mlx_lm", "transformers")


def config_overrides(config: dict) -> dict:
    """Config keys mlx-lm needs but a transformers 5 config may lack (the RoPE base and scaling)."""
    rope = config.get("rope_parameters") or {}
    overrides: dict = {}
    if "rope_theta" not in config and "rope_theta" in rope:
        overrides["rope_theta"] = rope["rope_theta"]
    if not config.get("rope_scaling") and rope.get("rope_type", "default") != "default":
        overrides["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    return overrides


def read_config(folder: Path) -> dict:
    check_model_folder(folder)
    if not any(folder.glob("model*.safetensors")):
        raise BackendError(f"{folder} has no model*.safetensors: mlx reads safetensors weights only "
                           "(save the model with save_pretrained(..., safe_serialization=True))")
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BackendError(f"cannot read {folder / 'config.json'}: {exc}") from exc


class MlxBackend(GrpoEngine):
    """One mlx-lm model + LoRA layers + AdamW; the update's old-policy log-probs as backends/update.py
    describes. mlx-lm's models apply no dropout of their own, so only LoRA dropout turns the reuse off."""

    name = "mlx"
    adapter_format = "mlx-lora"

    def __init__(self) -> None:
        super().__init__()
        self._draws = random.Random()

    @classmethod
    def is_available(cls, hw: Hardware) -> tuple[bool, str]:
        missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
        if missing:
            return False, f"{', '.join(missing)} not installed (pip install \"swarm-app[mlx]\")"
        if cls.runs_accelerated(hw):
            return True, f"MLX on the Apple GPU ({hw.apple_chip or 'Apple silicon'})"
        return True, "MLX on CPU (no Apple GPU here: correct but slow, reference BLAS)"

    @classmethod
    def runs_accelerated(cls, hw: Hardware) -> bool:
        return hw.apple_silicon

    def load(self, spec: ModelSpec) -> None:
        import mlx.core as mx
        from mlx_lm.utils import load_model

        self.close()
        folder = model_folder(spec.path)
        config = read_config(folder)
        tok = load_tokenizer(folder)
        try:
            model, _ = load_model(folder, model_config=config_overrides(config))
        except ValueError as exc:  # mlx-lm's "Model type X not supported." and weight mismatches
            raise BackendError(f"mlx-lm cannot load {folder} (model_type {config.get('model_type')!r}): {exc}; "
                               "use --backend torch for this model") from exc
        model.freeze()
        self._attach_lora(model, spec, mx)
        model.eval()
        self._model, self._tok, self._spec = model, tok, spec
        self.reuses_first_pass = spec.lora.dropout == 0
        self._end_id = tok.get_vocab().get(IM_END, tok.eos_token_id)
        self._stop_ids = stop_ids(tok, self._end_id, self._checkpoint_eos(folder))
        self._model_id = spec.reported_id()
        self._optimizer = self._new_optimizer() if spec.trainable else None
        log.info("loaded %s with mlx on %s", self._model_id, self.device())

    @staticmethod
    def _checkpoint_eos(folder: Path):
        path = folder / "generation_config.json"
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BackendError(f"cannot read {path}: {exc}") from exc

    @staticmethod
    def _attach_lora(model, spec: ModelSpec, mx) -> None:
        """mlx-lm's LoRA layers on the spec's target modules in every decoder layer (scale alpha / rank)."""
        import mlx.nn as nn
        from mlx_lm.tuner.utils import linear_to_lora_layers

        linear = {path for path, mod in model.layers[0].named_modules() if isinstance(mod, nn.Linear)}
        keys = sorted(p for p in linear if p.rsplit(".", 1)[-1] in spec.lora.target_modules)
        if not keys:
            names = sorted({p.rsplit(".", 1)[-1] for p in linear})
            raise BackendError(f"none of the LoRA target modules {list(spec.lora.target_modules)} exist in this model: "
                               f"set lora.target_modules to some of its linear layers ({', '.join(names)})")
        lora = spec.lora
        mx.random.seed(0)  # the same fresh adapter on every load
        linear_to_lora_layers(model, len(model.layers), {"rank": lora.rank, "scale": lora.alpha / lora.rank,
                                                         "dropout": lora.dropout, "keys": keys})
        mx.eval(model.parameters())

    def _new_optimizer(self):
        import mlx.optimizers as optim

        o = self._spec.optim
        # bias_correction=True: torch's AdamW corrects the moments; mlx's default does not.
        return optim.AdamW(learning_rate=o.learning_rate, weight_decay=o.weight_decay, bias_correction=True)

    # Generation

    def generate(self, prompts: list[Messages], n: int, sampling: Sampling,
                 progress: Progress | None = None) -> list[list[Completion]]:
        import mlx.core as mx

        self._require_model()
        seed = sampling.seed if sampling.seed is not None else self._draws.randrange(2**31)
        key = mx.random.key(seed)
        total = len(prompts) * sampling.max_new_tokens
        out = []
        for k, messages in enumerate(prompts):
            key, sub = mx.random.split(key)
            rows = self._sample_group(self.encode_prompt(messages), n, sampling, sub,
                                      lambda done, k=k: progress(k * sampling.max_new_tokens + done, total) if progress else None)
            out.append([self._completion(row) for row in rows])
        return out

    def _prefill(self, head: list[int], copies: int):
        return mlx_decode.prefill(self._model, head, copies)

    def _sample_group(self, ids: list[int], n: int, sampling: Sampling, key, report) -> list[list[int]]:
        """n completions of one prompt, decoded in lockstep; rows past a stop token keep decoding (ignored)."""
        import mlx.core as mx

        cache = self._prefill(ids[:-1], n) or mlx_decode.empty_cache(self._model)
        tokens = mx.array([[ids[-1]]] * n)
        stops = mx.array(self._stop_ids)
        finished = mx.zeros((n,), dtype=mx.bool_)
        rows: list[list[int]] = [[] for _ in range(n)]
        for step in range(sampling.max_new_tokens):
            logits = self._model(tokens, cache=cache)[:, -1, :].astype(mx.float32)
            key, sub = mx.random.split(key)
            picked = mlx_decode.pick(logits, sampling, sub)
            finished = finished | (picked[:, None] == stops[None, :]).any(axis=1)
            mx.eval(picked, finished)
            for row, token in zip(rows, picked.tolist()):
                row.append(token)
            report(step + 1)  # may raise Cancelled: nothing of this call is returned
            if finished.all().item():
                break
            tokens = picked[:, None]
        return rows

    # Training

    def _group_logps(self, seqs: list[Sequence]):
        """([B, T] log-probs of each completion token, [B, T] mask) for `seqs` sharing one prompt.

        The prompt but its last token goes through the model once; its cache is repeated for every
        completion and gradients flow back through it (see TorchBackend._token_logps for why). Tails are
        right-padded, so the causal mask alone keeps padding out of every real token's attention.
        """
        import mlx.core as mx

        head = seqs[0].ids[: seqs[0].prompt_len - 1]
        tails = [s.ids[len(head):] for s in seqs]
        width = max(map(len, tails))
        pad_id = self._tok.pad_token_id
        ids = mx.array([t + [pad_id] * (width - len(t)) for t in tails])
        logits = self._model(ids, cache=self._prefill(head, len(seqs)))[:, :-1].astype(mx.float32)
        targets = ids[:, 1:]
        logp = mx.take_along_axis(logits, targets[..., None], axis=-1).squeeze(-1) - mx.logsumexp(logits, axis=-1)
        mask = mx.arange(width - 1)[None, :] < mx.array([s.n_completion for s in seqs])[:, None]
        return logp, mask

    def _vocab_size(self) -> int:
        return self._model.args.vocab_size

    def _old_logps(self, seqs: list[Sequence]) -> list:
        """Per-sample 1-D log-probs under the policy as the round starts (computed once, no gradient)."""
        import mlx.core as mx

        out: list = [None] * len(seqs)
        for group in self._groups(seqs):
            logp, _ = self._group_logps([seqs[i] for i in group])
            mx.eval(logp)
            for row, i in enumerate(group):
                out[i] = mx.stop_gradient(logp[row, : seqs[i].n_completion])
        return out

    def _group_gradients(self, seqs: list[Sequence], old: list, advantages: list[float], total: int):
        """One pass through `nn.value_and_grad`: its loss, clipped tokens and own log-probs come out as the
        function's value, its gradient as a tree (see GrpoEngine)."""
        import mlx.core as mx
        import mlx.nn as nn

        from backends.mlx.grpo_loss import clip_cut, grpo_loss

        optim = self._spec.optim

        def group_loss():
            logp, mask = self._group_logps(seqs)
            own = mx.stop_gradient(logp)
            width = logp.shape[1]
            old_logp = mx.stack([own[row] if o is None else mx.pad(o, (0, width - o.shape[0]))
                                 for row, o in enumerate(old)])
            adv = mx.array([[a] for a in advantages])
            loss, _ = grpo_loss(logp, old_logp, adv, mask, optim.clip_low, optim.clip_high, num_tokens=total)
            # the loss's own rule on its own ratio, counted per sample (row)
            ratio = mx.exp(mx.where(mask, own - old_logp, 0.0))
            cut = (clip_cut(ratio, adv.astype(logp.dtype), optim.clip_low, optim.clip_high) & mask.astype(mx.bool_)).sum(axis=1)
            return loss, cut, own

        (loss, cut, own), grads = nn.value_and_grad(self._model, group_loss)()
        mx.eval(loss, cut, own, grads)
        return loss.item(), cut.tolist(), [own[row, : s.n_completion] for row, s in enumerate(seqs)], grads

    def _add_gradients(self, first, second):
        import mlx.core as mx
        from mlx.utils import tree_map

        total = tree_map(mx.add, first, second)
        mx.eval(total)  # one group's graph at a time, as the passes themselves
        return total

    def _clip_gradients(self, grads, max_norm: float):
        import mlx.optimizers as optim

        grads, norm = optim.clip_grad_norm(grads, max_norm)
        return grads, norm.item()

    def _apply_gradients(self, grads) -> None:
        import mlx.core as mx

        self._optimizer.update(self._model, grads)
        mx.eval(self._model.parameters(), self._optimizer.state)

    def _named_gradients(self, grads) -> dict:
        import numpy as np
        from mlx.utils import tree_flatten

        return {convert.mlx_to_peft_name(k): np.array(v).T for k, v in tree_flatten(grads)}

    # Adapter files (backends/mlx/adapter.py)

    def save_adapter(self, folder: Path) -> None:
        mlx_adapter.save(Path(folder), self._require_model(), self._optimizer, self._spec)

    def load_adapter(self, folder: Path) -> None:
        model = self._require_model()
        folder = Path(folder)
        weights = mlx_adapter.read_weights(folder, model, self._spec.lora)
        # Read everything before any weight changes: all or nothing.
        optimizer = None if self._optimizer is None else mlx_adapter.read_optimizer(
            folder / convert.MLX_OPTIMIZER, self._new_optimizer(), model)
        mlx_adapter.apply_weights(model, weights)
        self._optimizer = optimizer
        log.info("loaded adapter from %s", folder)

    def memory(self) -> int:
        from mlx.utils import tree_flatten

        if self._model is None:
            return 0
        weights = sum(v.nbytes for _, v in tree_flatten(self._model.parameters()))
        trainable = sum(v.nbytes for _, v in tree_flatten(self._model.trainable_parameters()))
        return weights + (2 * trainable if self._optimizer is not None else 0)  # AdamW: two moments each

    def device(self) -> str:
        if self._model is None:
            return "cpu"
        import mlx.core as mx

        return "mlx:gpu" if mx.default_device().type == mx.DeviceType.gpu else "mlx:cpu"

    def close(self) -> None:
        self._model = self._tok = self._optimizer = None
