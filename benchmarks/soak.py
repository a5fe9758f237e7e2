"""Soak: honest fake-engine nodes on loopback at 10x the normal receive rate; does anything grow?

N full Sessions (fake engine, own run folders under a temp dir) each drive a PeerNode of one local
swarm on 127.0.0.1. A real round of the bundled model takes ~2 s for 8 own groups, so a peer normally
receives ~4 rollouts/s from each neighbour (own_push_rate). The fake engine answers instantly; a sleep
in its `generate` paces a round at --round-s (0.2 s: 40 rollouts/s per node, 10x) and own_push_rate is
raised 10x to match, so the receive budgets (derived from it, swarm_app/peer/core/limits.py) carry that load.

Every --sample-s (60 s; 10 s in --minutes 5 quick mode) it records process RSS (psutil), open
descriptors, threads and asyncio tasks, and per node: pool and seen-cache sizes, the other bounded
maps (heard, peer records, addresses, author buckets, rejection reasons), rounds done, bans. After
each sample it rewrites soak-<M>min.json and .png in --out (atomically: a kill keeps what was
sampled). --trace adds the top tracemalloc growth since --trace-from-s (90 s: the pool is full).

    python -m benchmarks.soak --minutes 5
    nohup python -m benchmarks.soak --minutes 60 > benchmarks/results/soak/soak-60min.log 2>&1 &
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]

log = logging.getLogger("soak")
NORMAL_PUSH_RATE = 4.0
"""Own rollouts per second a real 2 s round of 8 groups publishes (ProtocolConfig.own_push_rate)."""


def stub_model(folder: Path) -> Path:
    """A folder that passes the model checks; the fake engine loads nothing from it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    return folder


def pace_fake_engine(round_s: float) -> None:
    """Make the fake engine's generate take `round_s` per call (one call per round for own groups)."""
    from backends.fake import FakeBackend

    instant = FakeBackend.generate

    def paced(self, prompts, n, sampling, progress=None):
        time.sleep(round_s)
        return instant(self, prompts, n, sampling, progress)

    FakeBackend.generate = paced


def settings_for(index: int, work: Path, model: Path):
    from swarm_app.kernel.settings import Settings

    settings = Settings()
    settings.model.path, settings.model.backend, settings.model.threads = str(model), "fake", 1
    settings.run.run_dir, settings.run.ui = str(work / f"node-{index}"), False
    settings.peer.enabled = False  # the soak hands each session its own node
    train = settings.train
    train.seed, train.rounds, train.eval_every, train.checkpoint_every = 100 + index, 0, 0, 50
    train.local, train.external, train.completions = 8, 8, 4
    return settings


def node_figures(node, rounds: int) -> dict:
    core, now = node.core, node.clock()
    stats = node.stats()
    return {"pool": stats.pool_size, "pool_bytes": stats.pool_bytes, "seen": stats.seen_size,
            "seen_floors": len(core.intake.admission.seen._floors), "heard": len(core.intake.heard),
            "peer_records": len(core.peers.records()), "addresses": len(core.addresses),
            "author_buckets": len(core.intake.admission._author_buckets), "rejected": dict(stats.rejected),
            "tasks": len(node._tasks), "links": len(node.send_queues.links), "gate_open": node.gate.open,
            "rounds": rounds, "published": stats.published, "accepted": stats.accepted,
            "neighbours": stats.neighbours, "bans": stats.bans,
            "banned_now": sum(r.is_banned(now) for r in core.peers.records())}


class Recorder:
    def __init__(self, out: Path, name: str, meta: dict, trace_from_s: float | None) -> None:
        self.json_path, self.png_path = out / f"{name}.json", out / f"{name}.png"
        self.meta, self.trace_from_s = meta, trace_from_s
        self.samples: list[dict] = []
        self.first_snapshot = None
        self.process = psutil.Process()
        self._plotter: subprocess.Popen | None = None

    def sample(self, started: float, nodes, rounds: list[int]) -> dict:
        row = {"t_s": round(time.monotonic() - started, 1), "rss_mb": round(self.process.memory_info().rss / 2**20, 1),
               "fds": self.process.num_fds(), "threads": self.process.num_threads(),
               "asyncio_tasks": len(asyncio.all_tasks()),
               "nodes": [node_figures(node, rounds[i]) for i, node in enumerate(nodes)]}
        if self.trace_from_s is not None and row["t_s"] >= self.trace_from_s:
            snapshot = tracemalloc.take_snapshot()
            if self.first_snapshot is None:
                self.first_snapshot = snapshot
            else:
                top = snapshot.compare_to(self.first_snapshot, "lineno")[:8]
                row["growth"] = [f"{s.size_diff / 1024:+.0f} KiB {s.count_diff:+d} {s.traceback}" for s in top]
        self.samples.append(row)
        self.write()
        return row

    def write(self) -> None:
        doc = {**self.meta, "samples": self.samples}
        tmp = self.json_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, self.json_path)
        self.plot()

    def plot(self) -> None:
        """The PNG, drawn by a child process from the JSON: matplotlib in this process would be part of
        the RSS being measured (it was, until the first 60-minute soak: its figures churned each minute)."""
        if self._plotter is not None and self._plotter.poll() is None:
            return  # the last drawing is still going; the next sample draws again
        self._plotter = subprocess.Popen([sys.executable, __file__, "--plot", str(self.json_path), str(self.png_path)])


def plot(json_path: Path, png_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = json.loads(json_path.read_text())
    samples = meta["samples"]
    minutes = [s["t_s"] / 60 for s in samples]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    axes[0][0].plot(minutes, [s["rss_mb"] for s in samples])
    axes[0][0].set_title("process RSS (MB)")
    axes[0][1].plot(minutes, [s["fds"] for s in samples])
    axes[0][1].set_title("open descriptors")
    for i in range(len(samples[0]["nodes"])):
        axes[1][0].plot(minutes, [s["nodes"][i]["pool"] for s in samples], label=f"pool {i}")
        axes[1][0].plot(minutes, [s["nodes"][i]["seen"] for s in samples], "--", label=f"seen {i}")
        axes[1][1].plot(minutes, [s["nodes"][i]["rounds"] for s in samples], label=f"node {i}")
    axes[1][0].set_title("pool and seen-cache entries")
    axes[1][1].set_title("rounds done")
    for ax in axes[1]:
        ax.set_xlabel("minutes")
        ax.legend(fontsize=7)
    fig.suptitle(f"soak: {meta['nodes']} nodes, {meta['rate_x']}x receive rate")
    fig.tight_layout()
    tmp = png_path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    os.replace(tmp, png_path)


async def soak(args: argparse.Namespace, work: Path) -> Recorder:
    from swarm_app.kernel.events import RoundFinished
    from swarm_app.peer.io.local_nodes import demo_config, local_swarm, wait_until_meshed
    from swarm_app.session.session import Session, SessionOptions

    pace_fake_engine(args.round_s)
    config = demo_config()
    config = config.with_protocol(own_push_rate=NORMAL_PUSH_RATE * args.rate_x)
    model = stub_model(work / "model")
    name = f"soak-{args.minutes:g}min"
    meta = {"nodes": args.nodes, "minutes": args.minutes, "rate_x": args.rate_x, "round_s": args.round_s,
            "sample_s": args.sample_s, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "own_push_rate": config.protocol.own_push_rate, "conn_rate": config.protocol.conn_rate}
    recorder = Recorder(args.out, name, meta, args.trace_from_s if args.trace else None)
    rounds = [0] * args.nodes
    async with local_swarm(args.nodes, config) as nodes:
        await wait_until_meshed(nodes, timeout_s=30)
        sessions = []
        for i, node in enumerate(nodes):
            def on_event(event, i=i):
                if isinstance(event, RoundFinished):
                    rounds[i] += 1
            session = Session(settings_for(i, work, model), SessionOptions(fresh=True), exchange=node)
            session.subscribe(on_event)
            await asyncio.to_thread(session.open)
            sessions.append(session)
        runs = [asyncio.create_task(s.run()) for s in sessions]
        started = time.monotonic()
        try:
            while time.monotonic() - started < args.minutes * 60:
                row = recorder.sample(started, nodes, rounds)
                log.info("t=%5.0f s  rss %.1f MB  fds %d  tasks %d  rounds %s  pool %s  seen %s  bans %s", row["t_s"],
                         row["rss_mb"], row["fds"], row["asyncio_tasks"], rounds, [n["pool"] for n in row["nodes"]],
                         [n["seen"] for n in row["nodes"]], [n["bans"] for n in row["nodes"]])
                failed = [r for r in runs if r.done()]
                if failed:
                    log.error("a session stopped early: %r", failed[0].exception())
                    break
                await asyncio.sleep(args.sample_s)
            recorder.sample(started, nodes, rounds)
        finally:
            for session in sessions:
                session.stop()
            await asyncio.gather(*runs, return_exceptions=True)
            for session in sessions:
                session.close()
    return recorder


def main() -> int:
    if sys.argv[1:2] == ["--plot"]:
        plot(Path(sys.argv[2]), Path(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--rate-x", type=float, default=10.0, help="receive rate as a multiple of the normal 4/s")
    parser.add_argument("--round-s", type=float, default=None, help="seconds per fake round (default: 8 groups at the rate)")
    parser.add_argument("--sample-s", type=float, default=None, help="default 60 (10 when --minutes <= 5)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "soak")
    parser.add_argument("--trace", action="store_true", help="record tracemalloc growth (slower)")
    parser.add_argument("--trace-from-s", type=float, default=90.0,
                        help="growth is measured from this time on (the pool is full after ~60 s)")
    args = parser.parse_args()
    args.round_s = args.round_s or 8 / (NORMAL_PUSH_RATE * args.rate_x)
    args.sample_s = args.sample_s or (10.0 if args.minutes <= 5 else 60.0)
    args.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("swarm_app").setLevel(logging.WARNING)
    if args.trace:
        tracemalloc.start(8)
    with tempfile.TemporaryDirectory(prefix="swarm-soak-") as tmp:
        work = Path(tmp)
        os.environ["SWARM_HOME"] = str(work / "home")  # throwaway user dirs: the developer's are not touched
        recorder = asyncio.run(soak(args, work))
    first, last = recorder.samples[0], recorder.samples[-1]
    print(f"RSS {first['rss_mb']} -> {last['rss_mb']} MB, fds {first['fds']} -> {last['fds']}, "
          f"rounds {[n['rounds'] for n in last['nodes']]}, bans {[n['bans'] for n in last['nodes']]}; "
          f"{recorder.json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
