"""The `swarm` command: parses flags, builds the one Settings object, and hands over to a view.

Importing this module is cheap (no torch, textual, mlx or llama_cpp): `swarm --version` answers in
well under a second. Errors the user can fix print one line and exit 2; nothing is written first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path

from swarm_app import __version__, logs
from swarm_app.peer import PROTOCOL_VERSION
from swarm_app.errors import SwarmError, UsageError

log = logging.getLogger(__name__)

RUN_FLAGS = {
    # flag dest -> "section.field" of Settings
    "model": "model.path", "backend": "model.backend", "threads": "model.threads",
    "tasks": "tasks.preset", "rounds": "train.rounds", "local": "train.local", "external": "train.external",
    "completions": "train.completions", "seed": "train.seed", "run_dir": "run.run_dir",
    "log_format": "run.log_format", "peer": "peer.peers", "listen": "peer.listen",
    "metrics_listen": "peer.metrics_listen", "mdns": "peer.mdns", "share": "peer.share", "online": "peer.enabled",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swarm", description="A SAPO node: train your own LoRA with a swarm of peers.")
    parser.add_argument("--version", action="version", version=f"swarm-app {__version__} (protocol RSP/1 "
                        f"v{PROTOCOL_VERSION}; swarm doctor checks it against your peers)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more (to stderr)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser("run", help="train round after round (resumes the run it finds)")
    _common_model_flags(run)
    run.add_argument("--no-ui", dest="ui", action="store_false", default=None,
                     help="headless: one line per round (also when there is no terminal)")
    run.add_argument("--tasks", metavar="PRESET", help="task mix: easy (default) or paper")
    run.add_argument("--rounds", type=int, metavar="N", help="rounds in total (a resumed run continues up to N)")
    run.add_argument("--local", type=int, metavar="I", help="own questions per round")
    run.add_argument("--external", type=int, metavar="J", help="peers' rollout groups per round")
    run.add_argument("--completions", type=int, metavar="L", help="completions per question")
    run.add_argument("--seed", type=int, metavar="S")
    run.add_argument("--run-dir", metavar="DIR", help="run folder (default: one run in the user data dir)")
    run.add_argument("--fresh", action="store_true", help="start over; an existing run is moved aside")
    run.add_argument("--log-format", choices=("text", "json"))
    run.add_argument("--gpus", metavar="all|0,1,...", help="one node per GPU, each with its own key, run folder "
                     "and port (headless; look at one with swarm watch --run-dir RUN-gpuN)")
    _peer_flags(run)

    demo = commands.add_parser("demo", help="a local swarm of N training nodes in this process (127.0.0.1)")
    _common_model_flags(demo)
    demo.add_argument("--nodes", type=int, default=4, metavar="N", help="nodes (default 4)")
    demo.add_argument("--rounds", type=int, default=10, metavar="R", help="rounds per node (default 10)")
    demo.add_argument("--local", type=int, metavar="I")
    demo.add_argument("--external", type=int, default=4, metavar="J", help="peers' groups per round (default 4)")
    demo.add_argument("--completions", type=int, metavar="L")
    demo.add_argument("--seed", type=int, metavar="S", help="seed of node 0; node i uses S + i (default 0)")
    demo.add_argument("--tasks", metavar="PRESET")
    demo.add_argument("--backends", metavar="A,B,...", help="engines of the nodes, in turn (e.g. torch,llama_cpp,mlx)")
    demo.add_argument("--no-ui", dest="ui", action="store_false", default=None, help="headless: one line per node per round")
    demo.add_argument("--out", metavar="DIR", help="where the nodes' run folders go (default: a new folder in the data dir)")

    watch = commands.add_parser("watch", help="look in on a node running on this machine (read-only)")
    watch.add_argument("--config", metavar="FILE", help="config file (default: config.toml in the user config dir)")
    watch.add_argument("--run-dir", metavar="DIR", help="the node's run folder (default: the default run)")
    watch.add_argument("--no-ui", dest="ui", action="store_false", default=None, help="print its headless lines")
    watch.add_argument("--log-format", choices=("text", "json"), help="with --no-ui")

    ident = commands.add_parser("identity", help="this node's key: show, export FILE, import FILE")
    from swarm_app.peer.commands import add_identity_arguments

    add_identity_arguments(ident)

    export = commands.add_parser("export", help="a run's trained model as GGUF files (llama.cpp, Ollama)")
    export.add_argument("run_dir", metavar="RUN", help="the run folder (swarm run prints it)")
    export.add_argument("--gguf", metavar="DIR", required=True, help="write base.gguf and adapter.gguf here")
    export.add_argument("--ollama", metavar="NAME", help="also write a Modelfile for `ollama create NAME`")

    convert = commands.add_parser("convert", help="move a run to an engine with another adapter format")
    convert.add_argument("--to", required=True, metavar="ENGINE", help="torch, llama_cpp or mlx")
    convert.add_argument("--run-dir", metavar="DIR", help="the run folder (default: the default run)")

    ev = commands.add_parser("eval", help="held-out accuracy with greedy decoding")
    _common_model_flags(ev)
    ev.add_argument("--adapter", metavar="DIR", help="a LoRA adapter: a checkpoint folder or a run folder")
    ev.add_argument("--tasks", metavar="PRESET")
    ev.add_argument("--n", type=int, default=200, help="held-out questions (default 200)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")

    doctor = commands.add_parser("doctor", help="this machine, the engines that run here and the one chosen")
    _common_model_flags(doctor)
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    _peer_flags(doctor)
    return parser


def _peer_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("swarm")
    group.add_argument("--peer", action="append", metavar="HOST:PORT",
                       help="a peer to dial first (repeatable); more are found by mDNS and peer exchange")
    group.add_argument("--listen", metavar="HOST:PORT", help="address to accept peers on (default 0.0.0.0:47470)")
    group.add_argument("--no-mdns", dest="mdns", action="store_false", default=None, help="no LAN discovery")
    group.add_argument("--no-share", dest="share", action="store_false", default=None,
                       help="do not send own rollouts (still receive)")
    group.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve Prometheus /metrics here")
    group.add_argument("--offline", dest="online", action="store_false", default=None,
                       help="no network at all: train alone")


def _common_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="config file (default: config.toml in the user config dir)")
    parser.add_argument("--model", metavar="PATH_OR_HF_ID", help="model folder or cached Hugging Face id")
    parser.add_argument("--backend", metavar="NAME", help="auto (default), torch, llama_cpp, mlx or fake; see swarm doctor")
    parser.add_argument("--threads", type=int, metavar="N", help="CPU threads for the engine (0: one per physical core)")


def load_settings_for(args: argparse.Namespace):
    from swarm_app.paths import user_dirs
    from swarm_app.settings import load_settings

    overrides = {dotted: getattr(args, dest, None) for dest, dotted in RUN_FLAGS.items()}
    if getattr(args, "ui", None) is not None:
        overrides["run.ui"] = args.ui
    config_flag = getattr(args, "config", None)
    config = Path(config_flag) if config_flag else user_dirs().config_file
    return load_settings(config, os.environ, overrides, config_required=bool(config_flag))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.typed = list(sys.argv[1:] if argv is None else argv)
    logs.to_stderr(args.verbose)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command](args)
    except SwarmError as exc:
        print(f"swarm: {exc.message}", file=sys.stderr)
        return exc.exit_code


def run_command(args: argparse.Namespace) -> int:
    settings = load_settings_for(args)
    if args.gpus:
        return _run_per_gpu(args, settings)
    from swarm_app.session import Session

    logs.to_file()
    session = Session(settings, fresh=args.fresh)  # it detects the hardware while loading
    try:
        if _wants_tui(settings):
            return _run_in_tui(session)
        from swarm_app.headless import HeadlessView

        session.subscribe(HeadlessView(settings.run.log_format))
        asyncio.run(_run_until_stopped(session))
    finally:
        session.close()
    return 0


async def _run_until_stopped(session) -> None:
    from swarm_app.stopping import on_stop_signals
    from swarm_app.watch_service import watched

    undo = on_stop_signals(asyncio.get_running_loop(), session.stop)
    try:
        async with watched(session):  # `swarm watch` can attach (127.0.0.1, token in watch.json)
            await session.run()
    finally:
        undo()


def _run_per_gpu(args: argparse.Namespace, settings) -> int:
    from swarm_app.hardware import detect
    from swarm_app.multi_gpu import parse_gpus, plan_nodes, run_nodes, without_gpus_flag
    from swarm_app.run_setup import run_dir_of

    gpus = parse_gpus(args.gpus, len(detect().gpus))
    flags = without_gpus_flag(args.typed[args.typed.index("run") + 1:])
    nodes = plan_nodes(gpus, flags, run_dir_of(settings), settings.peer.listen, settings.peer.enabled)
    for node in nodes:
        print(f"gpu {node.gpu}: run folder {node.run_dir}" + (f", listening on {node.listen}" if settings.peer.enabled else ""))
    return asyncio.run(run_nodes(nodes, settings.run.log_format))


def _wants_tui(settings) -> bool:
    """The TUI unless --no-ui, or when there is no terminal to draw on (a pipe, systemd, CI)."""
    if not settings.run.ui:
        return False
    if not (sys.stdin.isatty() and sys.__stderr__.isatty() and sys.stdout.isatty()):
        log.info("no terminal to draw on: showing the headless view (pass --no-ui to say so)")
        return False
    return True


def _run_in_tui(session) -> int:
    from swarm_app.events import RunStopped
    from swarm_app.headless import format_stop
    from swarm_app.tui.app import SwarmApp

    stops: list[RunStopped] = []

    async def source(deliver) -> None:
        session.subscribe(deliver)
        session.subscribe(lambda e: stops.append(e) if isinstance(e, RunStopped) else None)
        await _run_until_stopped(session)

    app = SwarmApp(source, session, subtitle=str(session.run_dir))
    with logs.terminal_owned_by_tui():
        code = app.run()
    if app.error is not None:
        raise app.error
    if stops:
        print(format_stop(stops[-1]))  # the terminal is back: say where the files are
    return code if code is not None else 0


def eval_command(args: argparse.Namespace) -> int:
    settings = load_settings_for(args)
    if args.n < 1:
        raise UsageError(f"--n {args.n} must be at least 1")
    from swarm_app.evaluate_command import run_eval
    from swarm_app.run_setup import detect_hardware

    report = run_eval(settings, Path(args.adapter) if args.adapter else None, args.n, detect_hardware(settings.model.backend))
    result = report.result
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(report.heading())
        print(f"held-out accuracy {result.accuracy:.3f} on {result.n} questions")
        for name, acc in result.per_task.items():
            print(f"  {name:28s} {acc:.3f}")
    return 0


def _demo_backends(text: str | None) -> tuple[str, ...]:
    from backends import registry

    names = tuple(name.strip() for name in (text or "").split(",") if name.strip())
    unknown = [name for name in names if name not in registry.names()]
    if unknown:
        raise UsageError(f"--backends: unknown engine {', '.join(unknown)}; choose from {', '.join(registry.names())}")
    return names


def demo_command(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 64:
        raise UsageError(f"--nodes {args.nodes} is out of range; allowed: 1 to 64")
    settings = load_settings_for(args)
    if settings.train.rounds == 0:
        raise UsageError("--rounds must be at least 1 for a demo")
    from swarm_app.demo_command import default_out_dir, format_summary, run_demo_swarm

    backends = _demo_backends(args.backends)
    out_dir = Path(args.out) if args.out else default_out_dir()
    print(f"demo: {args.nodes} nodes, {settings.train.rounds} rounds, J = {settings.train.external}; runs in {out_dir}")
    if _wants_tui(settings):
        from swarm_app.tui.demo import run_demo_in_tui

        with logs.terminal_owned_by_tui():
            summaries = run_demo_in_tui(settings, args.nodes, out_dir, backends)
    else:
        summaries = asyncio.run(run_demo_swarm(settings, args.nodes, out_dir, backends=backends))
    print(format_summary(summaries))
    return 1 if any(s.error for s in summaries) else 0


def doctor_command(args: argparse.Namespace) -> int:
    settings = load_settings_for(args)
    from swarm_app.doctor_command import build_report, format_text
    from swarm_app.hardware import detect

    report = build_report(settings, detect())
    print(json.dumps(report) if args.json else format_text(report))
    return 0


def watch_command(args: argparse.Namespace) -> int:
    settings = load_settings_for(args)
    from swarm_app.run_setup import run_dir_of
    from swarm_app.watch_command import watch

    return watch(run_dir_of(settings), settings.run.ui, settings.run.log_format)


def convert_command(args: argparse.Namespace) -> int:
    from swarm_app.convert_command import convert_run
    from swarm_app.run_setup import run_dir_of

    run_dir = Path(args.run_dir) if args.run_dir else run_dir_of(load_settings_for(args))
    round_index, new, kept = convert_run(run_dir, args.to)
    print(f"round {round_index} converted for {args.to}: {new} (the original is kept in {kept})")
    print(f"  resume with: swarm run --backend {args.to} --run-dir {run_dir}")
    return 0


def export_command(args: argparse.Namespace) -> int:
    from swarm_app.export_command import export_run

    done = export_run(Path(args.run_dir), Path(args.gguf), args.ollama or "")
    print(f"exported round {done.round}: {done.base} and {done.adapter}")
    print(f"  llama.cpp: llama-cli -m {done.base} --lora {done.adapter}")
    if done.modelfile is not None:
        print(f"  Ollama:    ollama create {args.ollama} -f {done.modelfile}  then  ollama run {args.ollama}")
    return 0


def identity_command(args: argparse.Namespace) -> int:
    from swarm_app.peer.commands import identity_main

    return identity_main(args)


COMMANDS = {"convert": convert_command, "export": export_command, "run": run_command, "eval": eval_command, "demo": demo_command, "identity": identity_command,
            "doctor": doctor_command, "watch": watch_command}
