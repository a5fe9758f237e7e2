"""`swarm export RUN --gguf DIR [--ollama NAME]`: a run's trained model as files other tools run.

Writes DIR/base.gguf (the run's base model, F32) and DIR/adapter.gguf (the newest checkpoint's LoRA
adapter as a GGUF LoRA), both with the same converter the llama.cpp engine uses, from the files on
disk: no model is loaded, so it works at any point during training (checkpoints are written
atomically). `--ollama NAME` adds a Modelfile for `ollama create NAME -f DIR/Modelfile`. Needs the
`gguf` package (extra [llamacpp]).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.files import write_text_atomic
from swarm_app.kernel.tasks import SYSTEM_PROMPT
from swarm_app.session.run_folder import RUN_FILE
from swarm_app.training.checkpoint import Checkpoints

CHATML_TEMPLATE = """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""


@dataclass(frozen=True)
class Exported:
    base: Path
    adapter: Path
    round: int
    modelfile: Path | None


def export_run(run_dir: Path, out: Path, ollama_name: str = "") -> Exported:
    if importlib.util.find_spec("gguf") is None:
        raise UsageError('swarm export needs the gguf package: pip install "swarm-app[llamacpp]" (or pip install gguf)')
    model_dir, checkpoint, round_index = _run_files(run_dir)
    from safetensors.numpy import load_file

    from backends import gguf_export
    from backends.base import BackendError

    out.mkdir(parents=True, exist_ok=True)
    alpha = json.loads((checkpoint / "adapter_config.json").read_text(encoding="utf-8"))["lora_alpha"]
    try:
        base = gguf_export.convert_model(model_dir, out / "base.gguf")
        state = load_file(str(checkpoint / "adapter_model.safetensors"))
        adapter = gguf_export.export_lora(state, gguf_export.read_config(model_dir), float(alpha), out / "adapter.gguf")
    except BackendError as exc:
        raise UsageError(f"cannot export {run_dir}: {exc}") from None
    modelfile = _write_modelfile(out, model_dir) if ollama_name else None
    return Exported(base, adapter, round_index, modelfile)


def _run_files(run_dir: Path) -> tuple[Path, Path, int]:
    """(base model folder, newest checkpoint folder, its round) of a run written by the torch-family engines."""
    try:
        started = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{run_dir} is not a run folder ({RUN_FILE}: {exc}); pass the folder `swarm run` "
                         "printed as its run folder") from None
    checkpoints = Checkpoints(run_dir)
    if not checkpoints.exists():
        raise UsageError(f"{run_dir} has no checkpoint yet: let it finish a round first")
    state, folder = checkpoints.load_latest()
    if not (folder / "adapter_model.safetensors").is_file():
        raise UsageError(f"the checkpoint {folder} holds no PEFT adapter (written by the {state.backend!r} engine); "
                         "only torch and llama_cpp runs export to GGUF")
    return Path(started["model"]), folder, state.round


def _write_modelfile(out: Path, model_dir: Path) -> Path:
    template = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template", "")
    lines = ["FROM ./base.gguf", "ADAPTER ./adapter.gguf", f'SYSTEM """{SYSTEM_PROMPT}"""']
    if "<|im_start|>" in str(template):  # ChatML, as the bundled model and Qwen use
        lines += [f'TEMPLATE """{CHATML_TEMPLATE}"""', 'PARAMETER stop "<|im_end|>"']
    # Other chat formats: Ollama reads the template that base.gguf carries, where it knows it.
    path = out / "Modelfile"
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path
