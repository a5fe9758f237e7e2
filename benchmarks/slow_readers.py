"""Slow readers: do clients that ask a node for big /sample answers and never read them pin its memory or
slow its training?

One `swarm run --backend fake` node in a subprocess (peer port on 127.0.0.1, no mDNS). Its pool is filled
with big valid rollouts (tests/peer/slow_clients.py: 24 authors, each from its own /24, ~48 KB each), and
kept so (one more per author every 3 s, in every phase), so an answer to GET /rsp/v1/sample?max=20 is
~0.9 MB. Then three phases, the same length each unless set:
- baseline: nothing but training; RSS (psutil) sampled every 0.5 s, rounds from metrics.jsonl;
- attack: --readers connections from --addresses source addresses (127.0.8.1, ...) each pipelining
  --requests sample requests and reading nothing (receive buffer 4 KiB), re-opened every --hold-s;
- after: the readers gone.
It prints, and writes to --out, the RSS of each phase (median and max, MB) against the baseline's median,
rounds per second against the baseline's, the kernel's TCP memory (/proc/net/sockstat, the whole
machine) and the 1-minute load average beside each, since the machine may be shared.

    python -m benchmarks.slow_readers --control            # 100 readers, 8 addresses, 60 s phases
    python -m benchmarks.slow_readers --attack-s 20 --baseline-s 10 --after-s 20 --out /tmp/quick.json

Linux only (127.x.y.z source addresses, /proc). The targets (issue 26): RSS during under the baseline
+ 100 MB, after within 10% of the baseline, rounds/s during at least 70% of the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "slow_readers.json"
MB = 1024 * 1024


def stub_model(folder: Path) -> Path:
    """A folder that passes the model checks; the fake engine loads nothing from it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}", encoding="utf-8")
    (folder / "tokenizer.json").write_text("{}", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}), encoding="utf-8")
    return folder


def start_node(work: Path, extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str, Path]:
    """The node, headless; returns (process, peer address, run folder) once it listens."""
    run_dir, out = work / "run", work / "node.out"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SWARM_PEER_ENABLED": "true", "SWARM_HOME": str(work / "home"),
           **(extra_env or {})}
    command = [sys.executable, "-m", "swarm_app", "run", "--backend", "fake", "--model", str(stub_model(work / "model")),
               "--run-dir", str(run_dir), "--no-ui", "--listen", "127.0.0.1:0", "--no-mdns", "--seed", "0"]
    with open(out, "wb") as sink:
        node = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    for _ in range(1200):
        found = re.search(rb"listening on (127\.0\.0\.1:\d+)", out.read_bytes())
        if found:
            return node, found.group(1).decode(), run_dir
        if node.poll() is not None:
            break
        time.sleep(0.05)
    node.kill()
    raise SystemExit(f"the node did not start:\n{out.read_text(encoding='utf-8', errors='replace')[-3000:]}")


def rounds_done(run_dir: Path) -> int:
    try:
        return (run_dir / "metrics.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def tcp_memory_mb() -> float:
    """Kernel memory in TCP buffers, machine-wide (pages in /proc/net/sockstat), MB."""
    try:
        found = re.search(r"TCP:.* mem (\d+)", Path("/proc/net/sockstat").read_text(encoding="utf-8"))
    except OSError:
        return float("nan")
    return int(found.group(1)) * resource.getpagesize() / MB if found else float("nan")


async def measure(pid: int, run_dir: Path, seconds: float, every_s: float = 0.5) -> dict:
    """RSS every `every_s` and the rounds finished over `seconds`."""
    process = psutil.Process(pid)
    rss, tcp, loads = [], [], []
    rounds_before, started = rounds_done(run_dir), time.monotonic()
    while time.monotonic() - started < seconds:
        rss.append(process.memory_info().rss / MB)
        tcp.append(tcp_memory_mb())
        loads.append(os.getloadavg()[0])
        await asyncio.sleep(every_s)
    elapsed = time.monotonic() - started
    return {"seconds": round(elapsed, 1), "rss_median_mb": round(statistics.median(rss), 1),
            "rss_max_mb": round(max(rss), 1), "rss_last_mb": round(rss[-1], 1),
            "tcp_kernel_max_mb": round(max(tcp), 1), "rounds_per_s": round((rounds_done(run_dir) - rounds_before) / elapsed, 1),
            "load_1min": round(statistics.mean(loads), 2)}


async def slow_reader(address: str, source: str, requests: int, hold_s: float, until: float, counts: dict) -> None:
    """Open, ask, read nothing, hold `hold_s`, drop, again, until `until` (monotonic)."""
    from tests.peer.slow_clients import SlowHttpReader

    while time.monotonic() < until:
        reader = SlowHttpReader(address, source, requests)
        try:
            await reader.open()
            counts["opened"] += 1
        except OSError:
            counts["failed"] += 1
        await asyncio.sleep(min(hold_s, max(0.0, until - time.monotonic())))
        reader.close()
        await asyncio.sleep(0.2)


async def scenario(args: argparse.Namespace) -> dict:
    from tests.peer.slow_clients import PoolFiller, sample_size

    with tempfile.TemporaryDirectory(prefix="slow-readers-") as tmp:
        node, address, run_dir = start_node(Path(tmp), dict(kv.split("=", 1) for kv in args.node_env))
        filler = PoolFiller(address)
        refills = None
        try:
            await filler.fill()
            # the fake engine's own rollouts turn a 4,096-entry pool over in ~20 s: fresh big ones all along,
            # in every phase alike (admitting them is part of the baseline's work too)
            end = time.monotonic() + args.settle_s + args.baseline_s + args.attack_s + args.after_s
            refills = asyncio.create_task(filler.keep_fresh(end))
            await asyncio.sleep(args.settle_s)  # imports, first rounds, the pool's own growth
            items, answer_bytes = await sample_size(address)
            baseline = await measure(node.pid, run_dir, args.baseline_s)
            print(f"baseline: {json.dumps(baseline)}", flush=True)
            counts = {"opened": 0, "failed": 0}
            until = time.monotonic() + args.attack_s
            sources = [f"127.0.8.{1 + i % args.addresses}" for i in range(args.readers)]
            attack = [asyncio.create_task(slow_reader(address, source, args.requests, args.hold_s, until, counts))
                      for source in sources]
            during = await measure(node.pid, run_dir, args.attack_s)
            await asyncio.gather(*attack)
            answer_after_attack = await sample_size(address)
            print(f"during:   {json.dumps(during)} ({counts['opened']} connections opened; an answer now: "
                  f"{answer_after_attack[0]} items, {answer_after_attack[1]} bytes)", flush=True)
            after = await measure(node.pid, run_dir, args.after_s)
            print(f"after:    {json.dumps(after)}", flush=True)
            alive = node.poll() is None
        finally:
            if refills is not None:
                refills.cancel()
                await asyncio.gather(refills, return_exceptions=True)
            node.send_signal(signal.SIGINT)
            try:
                node.wait(60)
            except subprocess.TimeoutExpired:
                node.kill()
                node.wait()
    base = baseline["rss_median_mb"]
    return {
        "setup": {"readers": args.readers, "addresses": args.addresses, "requests_per_connection": args.requests,
                  "hold_s": args.hold_s, "answer_items": items, "answer_bytes": answer_bytes,
                  "answer_after_attack": list(answer_after_attack), "cpus": os.cpu_count()},
        "baseline": baseline, "during": {**during, **counts}, "after": after, "node_survived": alive,
        "rss_during_over_baseline_mb": round(during["rss_max_mb"] - base, 1),
        "rss_after_over_baseline_pct": round(100 * (after["rss_last_mb"] - base) / base, 1),
        "rounds_per_s_ratio_during": round(during["rounds_per_s"] / baseline["rounds_per_s"], 2)
        if baseline["rounds_per_s"] else None,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readers", type=int, default=100)
    parser.add_argument("--addresses", type=int, default=8)
    parser.add_argument("--requests", type=int, default=4, help="sample requests pipelined on each connection")
    parser.add_argument("--hold-s", type=float, default=15.0, help="how long a reader keeps a connection")
    parser.add_argument("--baseline-s", type=float, default=60.0)
    parser.add_argument("--attack-s", type=float, default=60.0)
    parser.add_argument("--after-s", type=float, default=60.0)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--control", action="store_true",
                        help="first run the same phases on another node with no readers: the drift of RSS and "
                             "the noise of rounds/s on this machine, for comparison")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--node-env", nargs="*", default=[], metavar="KEY=VALUE",
                        help="environment of the node only (e.g. MALLOC_ARENA_MAX=2, to compare allocators)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not sys.platform.startswith("linux"):
        raise SystemExit("Linux only: the readers use 127.0.8.x source addresses")
    control = None
    if args.control:
        control = asyncio.run(scenario(argparse.Namespace(**{**vars(args), "readers": 0})))
        print(f"control (no readers): RSS {control['baseline']['rss_median_mb']} MB -> {control['after']['rss_last_mb']} MB "
              f"({control['rss_after_over_baseline_pct']:+.1f}%) over the same phases; rounds/s ratio "
              f"{control['rounds_per_s_ratio_during']} (load {control['during']['load_1min']})", flush=True)
    result = asyncio.run(scenario(args))
    if control is not None:
        result["control"] = {key: control[key] for key in ("baseline", "during", "after", "rss_during_over_baseline_mb",
                                                          "rss_after_over_baseline_pct", "rounds_per_s_ratio_during")}
    lines = [
        f"RSS: baseline {result['baseline']['rss_median_mb']} MB (load {result['baseline']['load_1min']}); "
        f"during max {result['during']['rss_max_mb']} MB, +{result['rss_during_over_baseline_mb']} MB "
        f"(load {result['during']['load_1min']}); after {result['after']['rss_last_mb']} MB, "
        f"{result['rss_after_over_baseline_pct']:+.1f}% (load {result['after']['load_1min']})",
        f"rounds/s: baseline {result['baseline']['rounds_per_s']} (load {result['baseline']['load_1min']}), "
        f"during {result['during']['rounds_per_s']} (load {result['during']['load_1min']}): "
        f"ratio {result['rounds_per_s_ratio_during']}",
        f"kernel TCP memory, machine-wide: baseline max {result['baseline']['tcp_kernel_max_mb']} MB, during max "
        f"{result['during']['tcp_kernel_max_mb']} MB, after max {result['after']['tcp_kernel_max_mb']} MB",
    ]
    print("\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**result, "summary": lines}, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
