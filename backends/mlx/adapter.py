"""The MLX engine's adapter files: mlx-lm's LoRA format plus the AdamW state, written and read back.

A folder holds adapter_config.json and adapters.safetensors (what `mlx_lm.generate --adapter-path` reads;
names and layout in adapter_convert.py) and optimizer.safetensors (the flattened AdamW state: step,
learning rate, per-parameter moments m and v, and our weight_decay). Reading checks everything before
the caller changes any weight, so a bad folder leaves the model as it was.
Must not import swarm_app, and imports mlx only inside its functions.
"""

from __future__ import annotations

import json
from pathlib import Path

from backends import adapter_convert as convert
from backends.base import BackendError, LoraConfig, ModelSpec


def save(folder: Path, model, optimizer, spec: ModelSpec) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    folder.mkdir(parents=True, exist_ok=True)
    weights = dict(tree_flatten(model.trainable_parameters()))
    mx.save_safetensors(str(folder / convert.MLX_WEIGHTS), weights)
    keys, layers = convert.layer_keys(list(weights))
    lora = spec.lora
    config = convert.mlx_config(lora.rank, lora.alpha, lora.dropout, keys, layers)
    (folder / convert.MLX_CONFIG).write_text(json.dumps(config, indent=2), encoding="utf-8")
    if optimizer is None:
        return
    # Fills in zero moments before the first update and keeps existing ones (mlx's init only fills empty states).
    optimizer.init(model.trainable_parameters())
    state = dict(tree_flatten(optimizer.state))
    state["weight_decay"] = mx.array(spec.optim.weight_decay)
    mx.save_safetensors(str(folder / convert.MLX_OPTIMIZER), state)


def check_config(folder: Path, lora: LoraConfig) -> None:
    config_file = folder / convert.MLX_CONFIG
    if not config_file.is_file() or not (folder / convert.MLX_WEIGHTS).is_file():
        hint = (" (it holds a PEFT adapter: convert it with `python -m backends.adapter_convert --to mlx "
                f"{folder} NEW_DIR`)") if (folder / convert.PEFT_WEIGHTS).is_file() else ""
        raise BackendError(f"{folder} is not an mlx-lm adapter folder: it needs {convert.MLX_CONFIG} and "
                           f"{convert.MLX_WEIGHTS}{hint}")
    params = convert.read_json(config_file).get("lora_parameters", {})
    if (params.get("rank"), params.get("scale")) != (lora.rank, lora.alpha / lora.rank):
        raise BackendError(f"the adapter in {folder} has rank {params.get('rank')}, scale {params.get('scale')}; "
                           f"this model uses rank {lora.rank}, alpha {lora.alpha}: use matching LoRA settings")


def read_weights(folder: Path, model, lora: LoraConfig) -> dict:
    """The adapter's tensors, checked against the model's LoRA parameters (names and shapes)."""
    from mlx.utils import tree_flatten

    check_config(folder, lora)
    weights = _read(folder / convert.MLX_WEIGHTS)
    expected = {k: tuple(v.shape) for k, v in tree_flatten(model.trainable_parameters())}
    if {k: tuple(v.shape) for k, v in weights.items()} != expected:
        raise BackendError(f"the adapter in {folder} does not fit this model and LoRA settings ({len(weights)} "
                           f"tensors, {len(expected)} expected): start a fresh adapter or use matching settings")
    return weights


def apply_weights(model, weights: dict) -> None:
    import mlx.core as mx

    model.load_weights(list(weights.items()), strict=False)
    mx.eval(model.parameters())


def read_optimizer(path: Path, optimizer, model):
    """`optimizer` (fresh) holding `path`'s moments and step."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    if not path.is_file():  # resetting Adam's moments silently would change training without a word
        raise BackendError(f"the optimizer state {path.name} is missing from {path.parent}")
    state = _read(path)
    state.pop("weight_decay", None)
    optimizer.init(model.trainable_parameters())
    if any(key.endswith((".m", ".v")) for key in state):  # none: saved before any step, fresh moments are that state
        if set(state) != set(dict(tree_flatten(optimizer.state))):
            raise BackendError(f"the optimizer state {path} does not fit this adapter: start a fresh adapter")
        optimizer.state = tree_unflatten(list(state.items()))
    mx.eval(optimizer.state)  # materialized here, for the same reason as in _read
    return optimizer


def _read(path: Path) -> dict:
    import mlx.core as mx

    try:
        arrays = mx.load(str(path))
        # Loaded now, not lazily: a lazy array belongs to this thread's stream, and the session loads on
        # one thread and trains on another ("There is no Stream(cpu, 1) in current thread").
        mx.eval(list(arrays.values()))
        return arrays
    except (OSError, ValueError, RuntimeError) as exc:
        raise BackendError(f"cannot read {path}: {exc}") from exc
