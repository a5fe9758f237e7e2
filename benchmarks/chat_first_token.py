"""How soon does `swarm chat --run-dir RUN --prompt ...` show its first token, and how fast does it stream?

Each repeat runs the command as a user would (a new process: imports, model and adapter load, then the
answer), on 1 thread, and times from the process start to the first byte of the answer on stdout (time to
first token) and the answer's tokens over the time from its first byte to its last (tokens/s; tokens
counted with the model's own tokenizer). Prints the median of N repeats, and each repeat with --json.
Without --run-dir it first trains a run of 2 rounds (`swarm run --offline`) in a temporary folder. With
--beside-node the run goes on training (`swarm run --threads 1`, a process of its own) while the chats are
timed, as issue 40 asks: the chat then shares the 2 cores with a training node.

    python -m benchmarks.chat_first_token --repeats 5
    python -m benchmarks.chat_first_token --repeats 5 --beside-node --json > benchmarks/results/chat_first_token.json
    python -m benchmarks.chat_first_token --run-dir RUN --backend llama_cpp --repeats 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWARM = [sys.executable, "-m", "swarm_app"]
PROMPT = "What is 3 + 4?"


def timed_chat(run_dir: Path, backend: str, prompt: str) -> dict:
    """One `swarm chat --prompt` process: seconds to its first answer byte, to its end, and its answer."""
    argv = [*SWARM, "chat", "--run-dir", str(run_dir), "--threads", "1", "--prompt", prompt]
    if backend:
        argv += ["--backend", backend]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    chunks, times = [], []
    while chunk := os.read(proc.stdout.fileno(), 4096):  # the time of each piece as it arrives, not at exit
        chunks.append(chunk)
        times.append(time.perf_counter())
    first, rest = (chunks[0], b"".join(chunks[1:])) if chunks else (b"", b"")
    first_at, last_at = (times[0], times[-1]) if times else (start, start)
    err = proc.stderr.read().decode("utf-8", "replace")
    if proc.wait() != 0 or not first:
        raise SystemExit(f"swarm chat failed: {err.strip()}")
    # tokens/s over first-to-last piece: the first token's own decode is in first_token_s
    return {"first_token_s": first_at - start, "stream_s": last_at - first_at,
            "answer": (first + rest).decode("utf-8").rstrip("\n"),
            "engine": err.rsplit(" on the ", 1)[-1].strip().removesuffix(" engine")}


def token_count(text: str) -> int:
    from transformers import PreTrainedTokenizerFast

    from swarm_app.kernel.paths import bundled_model_dir

    tok = PreTrainedTokenizerFast.from_pretrained(str(bundled_model_dir()), local_files_only=True)
    return len(tok(text, add_special_tokens=False)["input_ids"])


def trained_run(folder: Path) -> Path:
    run_dir = folder / "run"
    subprocess.run([*SWARM, "run", "--no-ui", "--offline", "--threads", "1", "--rounds", "2", "--run-dir", str(run_dir)],
                   check=True, capture_output=True)
    return run_dir


def training_node(run_dir: Path) -> subprocess.Popen:
    """The run's node, training on (1 thread, offline, no end), once its first new round is in metrics.jsonl."""
    metrics = run_dir / "metrics.jsonl"
    rows = len(metrics.read_text().splitlines())
    node = subprocess.Popen([*SWARM, "run", "--no-ui", "--offline", "--threads", "1", "--rounds", "0",
                             "--run-dir", str(run_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(metrics.read_text().splitlines()) <= rows:
        if node.poll() is not None or time.monotonic() > deadline:
            node.kill()
            raise SystemExit("the node beside the chat did not train a round within 120 s")
        time.sleep(0.2)
    return node


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, help="a run folder with a checkpoint (default: train one of 2 rounds)")
    parser.add_argument("--backend", default="", help="engine (default: the one that wrote the checkpoint)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--json", action="store_true", help="print every repeat as one JSON object")
    parser.add_argument("--beside-node", action="store_true", help="time the chats while the run trains on")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.run_dir or trained_run(Path(tmp))
        node = training_node(run_dir) if args.beside_node else None
        try:
            runs = [timed_chat(run_dir, args.backend, args.prompt) for _ in range(args.repeats)]
            load = os.getloadavg()[0]
            trained = node is None or node.poll() is None  # the node was still training when the last chat ended
        finally:
            if node is not None:
                node.terminate()
                node.wait(timeout=60)
    for run in runs:
        tokens = token_count(run["answer"])  # after the first piece: tokens - 1 in stream_s, the end token too
        run["tokens"], run["tokens_per_s"] = tokens, tokens / run["stream_s"] if run["stream_s"] > 0 else float("inf")
    summary = {"repeats": len(runs), "engine": runs[0]["engine"],
               "median_first_token_s": statistics.median(r["first_token_s"] for r in runs),
               "median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
               "beside_training_node": bool(args.beside_node and trained), "load_average_1m": round(load, 2)}
    if args.json:
        print(json.dumps({**summary, "runs": runs}, indent=2))
    else:
        print(f"swarm chat on {summary['engine']}, 1 thread, median of {len(runs)}: first token after "
              f"{summary['median_first_token_s']:.2f} s (process start included), {summary['median_tokens_per_s']:.0f} tokens/s"
              f"{', beside a training node' if summary['beside_training_node'] else ''} (load {load:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
