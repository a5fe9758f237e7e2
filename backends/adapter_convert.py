"""Conversion of a LoRA adapter folder between the PEFT format (torch, llama_cpp) and mlx-lm's format (mlx).

Owns the two layouts and the mapping between them, so a run can move between engines:
- PEFT: adapter_config.json (r, lora_alpha, target_modules) + adapter_model.safetensors with
  `base_model.model.<path>.lora_A.weight` [r, in] and `<path>.lora_B.weight` [out, r];
  optimizer.pt: torch AdamW's state_dict, moments indexed by the position of the parameter in the model.
- mlx-lm: adapter_config.json (fine_tune_type, num_layers, lora_parameters {rank, scale, dropout, keys})
  + adapters.safetensors with `<path>.lora_a` [in, r] and `<path>.lora_b` [r, out];
  optimizer.safetensors: `<path>.lora_a.m`/`.v` and `step` (what backends/mlx/engine.py writes).
Both compute x @ A^T @ B^T * alpha/r, so the conversion transposes and keeps scale = alpha/r; Adam's
moments are elementwise and transpose the same way, so a converted run resumes with its optimizer state.
Must not import swarm_app; imports torch only to read or write optimizer.pt, and mlx not at all.

    python -m backends.adapter_convert --to mlx|peft SOURCE_DIR TARGET_DIR
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from backends.base import BackendError

PEFT_CONFIG = MLX_CONFIG = "adapter_config.json"
PEFT_WEIGHTS = "adapter_model.safetensors"
MLX_WEIGHTS = "adapters.safetensors"
PEFT_OPTIMIZER = "optimizer.pt"
MLX_OPTIMIZER = "optimizer.safetensors"
PEFT_PREFIX = "base_model.model."
MODULE_ORDER = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The order transformers registers a decoder layer's linear layers in (attention, then MLP): torch's AdamW
state is indexed by parameter position, which follows it."""
_PEFT_KEY = re.compile(r"^base_model\.model\.(?P<path>.+)\.lora_(?P<ab>[AB])\.weight$")
_MLX_KEY = re.compile(r"^(?P<path>.+)\.lora_(?P<ab>[ab])$")
_LAYER = re.compile(r"\.layers\.(\d+)\.")


def peft_to_mlx_name(name: str) -> str:
    match = _PEFT_KEY.match(name)
    if match is None:
        raise BackendError(f"{name!r} is not a PEFT LoRA weight name: only LoRA A/B matrices convert "
                           "(no DoRA, no modules_to_save)")
    return f"{match['path']}.lora_{match['ab'].lower()}"


def mlx_to_peft_name(name: str) -> str:
    match = _MLX_KEY.match(name)
    if match is None:
        raise BackendError(f"{name!r} is not an mlx-lm LoRA weight name (…lora_a / …lora_b)")
    return f"{PEFT_PREFIX}{match['path']}.lora_{match['ab'].upper()}.weight"


def torch_order(names: list[str]) -> list[str]:
    """PEFT weight names in the order the torch engine's parameters (and so its AdamW state) come in."""
    def key(name: str):
        layer = _LAYER.search(name)
        module = name.rsplit(".lora_", 1)[0].rsplit(".", 1)[-1]
        rank = MODULE_ORDER.index(module) if module in MODULE_ORDER else len(MODULE_ORDER)
        return (int(layer.group(1)) if layer else -1, rank, module, name.endswith("lora_B.weight"))
    return sorted(names, key=key)


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BackendError(f"{path} is missing: point to an adapter folder written by save_adapter") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BackendError(f"cannot read {path}: {exc}") from exc


def adapter_shape(folder: Path) -> tuple[int, int] | None:
    """(rank, alpha) of the LoRA adapter in `folder`, from its adapter_config.json in either format; None when
    the folder has no such file (another engine's format, or not an adapter: loading it says which)."""
    path = Path(folder) / PEFT_CONFIG
    if not path.is_file():
        return None
    config = read_json(path)
    if "r" in config:  # PEFT
        rank, alpha = config.get("r"), config.get("lora_alpha")
    else:  # mlx-lm, with our alpha beside its scale
        params = config.get("lora_parameters") or {}
        rank = params.get("rank")
        alpha = config.get("lora_alpha", params.get("scale", 0) * rank if isinstance(rank, int) else None)
    if not isinstance(rank, int) or isinstance(rank, bool) or not isinstance(alpha, (int, float)) or rank < 1:
        raise BackendError(f"{Path(folder) / PEFT_CONFIG} names no LoRA rank and alpha: point to an adapter "
                           "folder written by save_adapter")
    return rank, alpha


def _read_tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not path.is_file():
        raise BackendError(f"{path} is missing: point to an adapter folder written by save_adapter")
    try:
        return load_file(str(path))
    except (OSError, SafetensorError) as exc:
        raise BackendError(f"cannot read {path}: {exc}") from exc


def _write_tensors(tensors: dict[str, np.ndarray], path: Path, metadata: dict[str, str] | None = None) -> None:
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path), metadata=metadata)


def mlx_config(rank: int, alpha: float, dropout: float, keys: list[str], num_layers: int) -> dict:
    """mlx-lm's adapter_config.json (what `mlx_lm.generate --adapter-path` reads), plus our alpha."""
    return {"fine_tune_type": "lora", "num_layers": num_layers, "lora_alpha": alpha,
            "lora_parameters": {"rank": rank, "scale": alpha / rank, "dropout": dropout, "keys": sorted(keys)}}


def peft_config(rank: int, alpha: float, dropout: float, targets: list[str], base: str = "") -> dict:
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha, "lora_dropout": dropout,
            "target_modules": sorted(targets), "bias": "none", "base_model_name_or_path": base,
            "fan_in_fan_out": False, "inference_mode": True, "modules_to_save": None, "use_rslora": False,
            "use_dora": False}


def layer_keys(names: list[str]) -> tuple[list[str], int]:
    """(module paths inside a decoder layer, number of layers) of mlx weight names."""
    keys, layers = set(), 0
    for name in names:
        path = name.rsplit(".lora_", 1)[0]
        match = re.search(r"layers\.(\d+)\.(.+)$", path)
        if match is None:
            raise BackendError(f"{name!r} is outside the decoder layers: this converter handles layer LoRA only")
        keys.add(match.group(2))
        layers = max(layers, int(match.group(1)) + 1)
    return sorted(keys), layers


def peft_to_mlx(source: Path, target: Path) -> None:
    """Write `source`'s PEFT adapter (and optimizer state, when present) into `target` in mlx-lm's format."""
    source, target = Path(source), Path(target)
    config = read_json(source / PEFT_CONFIG)
    if config.get("use_dora") or config.get("use_rslora"):
        raise BackendError(f"{source} is a DoRA/rsLoRA adapter: only plain LoRA converts")
    weights = {peft_to_mlx_name(k): v.T for k, v in _read_tensors(source / PEFT_WEIGHTS).items()}
    keys, layers = layer_keys(list(weights))
    rank, alpha = int(config["r"]), config["lora_alpha"]
    target.mkdir(parents=True, exist_ok=True)
    _write_tensors(weights, target / MLX_WEIGHTS)
    (target / MLX_CONFIG).write_text(json.dumps(mlx_config(rank, alpha, config.get("lora_dropout", 0.0), keys, layers),
                                                indent=2), encoding="utf-8")
    if (source / PEFT_OPTIMIZER).is_file():
        _write_tensors(_torch_to_mlx_moments(source / PEFT_OPTIMIZER, list(_read_tensors(source / PEFT_WEIGHTS))),
                       target / MLX_OPTIMIZER)


def mlx_to_peft(source: Path, target: Path, base_model: str = "") -> None:
    """Write `source`'s mlx-lm adapter (and optimizer state, when present) into `target` in the PEFT format."""
    source, target = Path(source), Path(target)
    config = read_json(source / MLX_CONFIG)
    if config.get("fine_tune_type", "lora") != "lora":
        raise BackendError(f"{source} holds a {config.get('fine_tune_type')!r} adapter: only LoRA converts")
    params = config["lora_parameters"]
    rank = int(params["rank"])
    alpha = config.get("lora_alpha", params["scale"] * rank)
    weights = {mlx_to_peft_name(k): v.T for k, v in _read_tensors(source / MLX_WEIGHTS).items()}
    targets = sorted({k.rsplit(".lora_", 1)[0].rsplit(".", 1)[-1] for k in weights})
    target.mkdir(parents=True, exist_ok=True)
    _write_tensors(weights, target / PEFT_WEIGHTS, metadata={"format": "pt"})
    (target / PEFT_CONFIG).write_text(json.dumps(peft_config(rank, alpha, params.get("dropout", 0.0), targets,
                                                             base_model), indent=2), encoding="utf-8")
    if (source / MLX_OPTIMIZER).is_file():
        _mlx_to_torch_moments(_read_tensors(source / MLX_OPTIMIZER), list(weights), target / PEFT_OPTIMIZER)


def _torch_to_mlx_moments(path: Path, peft_names: list[str]) -> dict[str, np.ndarray]:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError) as exc:
        raise BackendError(f"cannot read the optimizer state {path}: {exc}") from exc
    order = torch_order(peft_names)
    moments = state["state"]
    if len(moments) not in (0, len(order)):
        raise BackendError(f"{path} holds moments of {len(moments)} parameters, the adapter has {len(order)}")
    out: dict[str, np.ndarray] = {"step": np.array(0, dtype=np.uint64)}
    for i, name in enumerate(order):
        if i not in moments:
            continue
        mlx_name = peft_to_mlx_name(name)
        out[f"{mlx_name}.m"] = moments[i]["exp_avg"].float().numpy().T
        out[f"{mlx_name}.v"] = moments[i]["exp_avg_sq"].float().numpy().T
        out["step"] = np.array(int(moments[i]["step"]), dtype=np.uint64)
    group = state["param_groups"][0]
    out["learning_rate"] = np.array(group["lr"], dtype=np.float32)
    out["weight_decay"] = np.array(group.get("weight_decay", 0.0), dtype=np.float32)
    return out


def _scalar(tensors: dict[str, np.ndarray], key: str, default: float) -> float:
    """A scalar entry of an optimizer file (mlx writes some as shape (1,), some as shape ())."""
    return float(np.asarray(tensors[key]).reshape(-1)[0]) if key in tensors else default


def _mlx_to_torch_moments(tensors: dict[str, np.ndarray], peft_names: list[str], path: Path) -> None:
    import torch

    step = _scalar(tensors, "step", 0.0)
    state = {}
    for i, name in enumerate(torch_order(peft_names)):
        mlx_name = peft_to_mlx_name(name)
        if f"{mlx_name}.m" not in tensors:
            continue
        state[i] = {"step": torch.tensor(step),
                    "exp_avg": torch.from_numpy(np.ascontiguousarray(tensors[f"{mlx_name}.m"].T)),
                    "exp_avg_sq": torch.from_numpy(np.ascontiguousarray(tensors[f"{mlx_name}.v"].T))}
    # torch's load_state_dict takes the saved group whole: build a complete one from this torch's AdamW.
    lr, decay = _scalar(tensors, "learning_rate", 3e-4), _scalar(tensors, "weight_decay", 0.0)
    group = torch.optim.AdamW([torch.zeros(1)], lr=lr, weight_decay=decay).state_dict()["param_groups"][0]
    group["params"] = list(range(len(peft_names)))
    torch.save({"state": state, "param_groups": [group]}, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Convert a LoRA adapter folder between PEFT and mlx-lm formats")
    parser.add_argument("--to", choices=("mlx", "peft"), required=True)
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    (peft_to_mlx if args.to == "mlx" else mlx_to_peft)(args.source, args.target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
