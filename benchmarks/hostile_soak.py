"""Hostile soak: two honest training nodes on loopback under a steady attack for an hour; does anything grow?

The honest nodes (full Sessions, fake engine paced at a real round's rate, as in soak.py) run with the
budgets of a `swarm run` node (Sybil budgets per address and /24 included). Against node 0, from their own
networks on loopback (127.0.5.0/24 and 127.0.6.0/24, distinct sources on Linux):
- Sybils: every second a fresh key connects from one of 99 addresses, announces a listen address of its
  own (which the address book may keep), pushes 2 valid rollouts and leaves;
- a useless pusher: a right answer repeated (no reward spread), 4 a second, reconnecting when banned;
- slow connections: 20 sockets that send half a request line and nothing more, re-opened when closed.
Every --sample-s it records RSS, descriptors, asyncio tasks and node 0's bounded tables (soak.Recorder)
into benchmarks/results/soak/hostile-<M>min.json (rewritten after each sample: a kill keeps what was
measured). The summary line gives RSS growth from minute 10 to the end, descriptors and the address book.

    python -m benchmarks.hostile_soak --minutes 5
    nohup python -m benchmarks.hostile_soak --minutes 60 > benchmarks/results/soak/hostile-60min.log 2>&1 &
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.soak import NORMAL_PUSH_RATE, Recorder, pace_fake_engine, settings_for, stub_model

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("hostile_soak")


async def connect(node, identity, ip: str, listen: str | None):
    """A websocket from `ip` that has completed the hello (announcing `listen`); (session, ws)."""
    import aiohttp

    from swarm_app.peer.core.messages import ClientHandshake, decode_frame, encode

    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(ip, 0)),
                                 timeout=aiohttp.ClientTimeout(total=10))
    try:
        ws = await http.ws_connect(f"http://{node.address}/rsp/v1/ws")
        hs = ClientHandshake(identity, listen)
        await ws.send_str(encode(hs.start()))
        reply = await ws.receive(timeout=5)
        await ws.send_str(encode(hs.on_server_hello(decode_frame(reply.data))))
        return http, ws
    except BaseException:
        await http.close()
        raise


async def sybils(node, counters: dict) -> None:
    from swarm_app.peer.core.identity import Identity
    from swarm_app.peer.core.messages import encode
    from tests.peer.helpers import make_rollout, signed

    k = 0
    while True:
        k += 1
        ip, identity = f"127.0.5.{2 + k % 99}", Identity.generate()
        with contextlib.suppress(Exception):
            http, ws = await connect(node, identity, ip, f"{ip}:{40000 + k % 20000}")
            now = int(time.time() * 1000)
            items = [signed(identity, make_rollout(seed=k, index=i), ts_ms=now + i).to_item() for i in range(2)]
            await ws.send_str(encode({"t": "push", "items": items}))
            await asyncio.sleep(0.2)
            await ws.close()
            await http.close()
            counters["sybils"] += 1
        await asyncio.sleep(1.0)


async def useless_pusher(node, counters: dict) -> None:
    from swarm_app.peer.core.identity import Identity
    from swarm_app.peer.core.messages import encode
    from tests.peer.helpers import make_rollout, signed

    identity, i = Identity.generate(), 0
    while True:
        with contextlib.suppress(Exception):
            http, ws = await connect(node, identity, "127.0.5.200", None)
            try:
                while not ws.closed:
                    i += 1
                    rollout = make_rollout(seed=10_000 + i)
                    useless = dataclasses.replace(rollout, completions=(rollout.completions[0],) * 4)
                    await ws.send_str(encode({"t": "push", "items": [signed(identity, useless).to_item()]}))
                    counters["useless"] += 1
                    await asyncio.sleep(0.25)
            finally:
                await http.close()
        await asyncio.sleep(2.0)


async def slow_connection(node, ip: str, counters: dict) -> None:
    host, port = node.address.rsplit(":", 1)
    while True:
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection(host, int(port), local_addr=(ip, 0))
            writer.write(b"GET /rsp/v1/in")
            counters["slow"] += 1
            await reader.read()  # until the node closes it (header timeout)
            writer.close()
        await asyncio.sleep(0.5)


async def hostile_soak(args: argparse.Namespace, work: Path) -> Recorder:
    from swarm_app.kernel.events import RoundFinished
    from swarm_app.peer.core.sources import SourceLimits
    from swarm_app.peer.io.local_nodes import demo_config, local_swarm, wait_until_meshed
    from swarm_app.session.session import Session, SessionOptions

    round_s = 8 / NORMAL_PUSH_RATE  # a real round's pace: 8 own groups every 2 s
    pace_fake_engine(round_s)
    config = dataclasses.replace(demo_config(), sources=SourceLimits())  # the budgets of a real node
    model = stub_model(work / "model")
    meta = {"nodes": 2, "minutes": args.minutes, "rate_x": 1.0, "round_s": round_s, "sample_s": args.sample_s,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "attack": __doc__.split("\n\n")[1]}
    recorder = Recorder(args.out, f"hostile-{args.minutes:g}min", meta, None)
    counters = {"sybils": 0, "useless": 0, "slow": 0}
    rounds = [0, 0]
    async with local_swarm(2, config) as nodes:
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
        attacks = [asyncio.create_task(sybils(nodes[0], counters)), asyncio.create_task(useless_pusher(nodes[0], counters))]
        attacks += [asyncio.create_task(slow_connection(nodes[0], f"127.0.6.{2 + k}", counters)) for k in range(20)]
        started = time.monotonic()
        try:
            while time.monotonic() - started < args.minutes * 60:
                row = recorder.sample(started, nodes, rounds)
                row["attack"] = dict(counters)
                log.info("t=%5.0f s  rss %.1f MB  fds %d  tasks %d  rounds %s  addresses %d  attack %s", row["t_s"],
                         row["rss_mb"], row["fds"], row["asyncio_tasks"], rounds, row["nodes"][0]["addresses"], counters)
                if any(r.done() for r in runs):
                    log.error("a session stopped early")
                    break
                await asyncio.sleep(args.sample_s)
            recorder.sample(started, nodes, rounds)["attack"] = dict(counters)
            recorder.write()
        finally:
            for task in attacks:
                task.cancel()
            await asyncio.gather(*attacks, return_exceptions=True)
            for session in sessions:
                session.stop()
            await asyncio.gather(*runs, return_exceptions=True)
            for session in sessions:
                session.close()
    return recorder


def summary(samples: list[dict], from_s: float) -> str:
    settled = [s for s in samples if s["t_s"] >= from_s] or samples
    first, last = settled[0], samples[-1]
    growth = (last["rss_mb"] - first["rss_mb"]) / first["rss_mb"]
    fds = [s["fds"] for s in settled]
    return (f"RSS {first['rss_mb']} MB at {first['t_s']:.0f} s -> {last['rss_mb']} MB at {last['t_s']:.0f} s "
            f"({growth:+.1%}); descriptors {min(fds)}-{max(fds)}; address book {last['nodes'][0]['addresses']}; "
            f"rounds {[n['rounds'] for n in last['nodes']]}; attack {last.get('attack')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--sample-s", type=float, default=None, help="default 60 (10 when --minutes <= 5)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "soak")
    args = parser.parse_args()
    args.sample_s = args.sample_s or (10.0 if args.minutes <= 5 else 60.0)
    args.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("swarm_app").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="swarm-hostile-") as tmp:
        work = Path(tmp)
        os.environ["SWARM_HOME"] = str(work / "home")
        recorder = asyncio.run(hostile_soak(args, work))
    print(summary(recorder.samples, from_s=min(600.0, args.minutes * 60 / 6)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
