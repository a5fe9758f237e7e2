#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU (issue 12), well under 5 minutes:
#   1. what the machine and torch see, and swarm doctor's choice;
#   2. the CUDA test of the torch engine and the conformance suite on the installed engines;
#   3. a round benchmark on the bundled model: 10 rounds on CUDA against 10 on CPU (1 thread), same seed,
#      median round time of each and the ratio.
# Run from the repository root in the project's venv: bash benchmarks/gpu_check.sh [OUT_DIR]
set -uo pipefail
out="${1:-benchmarks/results/gpu}"
mkdir -p "$out"
export SWARM_HOME="$(mktemp -d)" SWARM_PEER_ENABLED=false SWARM_TRAIN_EVAL_EVERY=0
{
  nvidia-smi --query-gpu=name,memory.total,memory.used,compute_cap,driver_version --format=csv
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), 'bf16', torch.cuda.is_available() and torch.cuda.is_bf16_supported())"
  swarm doctor --json
} > "$out/machine.txt" 2>&1
python -m pytest -q -p no:cacheprovider tests/backends/torch/test_cuda.py tests/backends/test_conformance.py > "$out/tests.txt" 2>&1
echo "tests: exit $?" >> "$out/tests.txt"
for where in cuda cpu; do
  if [ "$where" = cpu ]; then visible=""; else visible="${CUDA_VISIBLE_DEVICES:-0}"; fi
  CUDA_VISIBLE_DEVICES="$visible" swarm run --no-ui --offline --backend torch --threads 1 --seed 0 --rounds 10 \
    --run-dir "$SWARM_HOME/run-$where" > "$out/run-$where.txt" 2>&1
done
python - "$SWARM_HOME" "$out" <<'PY'
import json, statistics, sys
from pathlib import Path
home, out = Path(sys.argv[1]), Path(sys.argv[2])
medians = {}
for where in ("cuda", "cpu"):
    rows = [json.loads(l) for l in (home / f"run-{where}" / "metrics.jsonl").read_text().splitlines()]
    medians[where] = statistics.median(r["round_s"] for r in rows[1:])  # round 1 warms up
result = {"median_round_s": medians, "cpu_over_cuda": medians["cpu"] / medians["cuda"]}
(out / "rounds.json").write_text(json.dumps(result, indent=2))
print(json.dumps(result))
PY
cat "$out/tests.txt" | tail -3
