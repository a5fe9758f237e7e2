"""`swarm doctor [--json]`: what this machine has, which engine runs here and why, and what is missing.

Owns the report: hardware, every known engine (installed, usable, why not, the exact install command),
the engine `auto` picks and the recommended sizing, the model `--model` resolves to, the user paths,
whether the listen port is free, the swarm the node would join and whether its bootstrap and `--peer`
addresses answer a TCP connect (2 s each, all at once; with their swarm and version from /info; a `dns:` seed's
records are read first, 3 s, and the addresses they list are tried too), and
whether peers outside can reach this machine: with the listen port free and a peer answering, a throwaway
probe server on the port asks up to 3 of them to dial it back (peer/io/reachability.py check_once; 10 s),
and the report says what the answer means and how to fix it. `failed` lists the checks that failed (no
engine, no model, the listen port of a node that joins the swarm taken, no bootstrap or `--peer` address
answering), each in a few words, so the command can exit non-zero and say which. It loads no model and
imports no engine's heavy modules, so it answers in about a second (plus the dial-back, when it runs); with
`pace=True` it also loads the model on the chosen engine and times one probe round (1 question x L
completions, scaled to the recommended I) for a seconds-per-round and rounds-per-hour estimate.
Must not write anything or change settings; swarm_app/commands/doctor.py prints the report.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from dataclasses import asdict
from pathlib import Path

from backends import registry
from backends.base import BackendError, Hardware
from swarm_app.kernel import hardware, sizing, swarms
from swarm_app.kernel.errors import SwarmError, UsageError
from swarm_app.kernel.paths import user_dirs
from swarm_app.kernel.settings import Settings
from swarm_app.resources.guest import limits
from swarm_app.resources.threads import candidates
from swarm_app.session.engine import open_engine, prepare_model
from swarm_app.session.model import ResolvedModel
from swarm_app.session.recommendations import read_recommendations

PEER_TIMEOUT_S = 2.0
DNS_TIMEOUT_S = 3.0
"""A DNS seed's records are asked for this long (a node waits 5 s, but keeps asking every 10 minutes)."""
ENGINE_MODULES = {"torch": ("torch", "transformers", "peft"), "mlx": ("mlx", "mlx_lm"),
                  "llama_cpp": ("llama_cpp", "gguf"), "fake": ()}
PYTORCH_INDEX = "https://download.pytorch.org/whl"
PACE_HINT = "not probed: `swarm doctor --pace` loads the model and times a probe round"


def torch_install_command(hw: Hardware) -> str:
    """pip command for the right torch build: CUDA on NVIDIA, PyPI on a Mac, the CPU build elsewhere
    (the same rule as tools/installer.py, which a fresh machine runs before this package exists)."""
    if hw.system == "Darwin":
        return "pip install torch"
    index = cuda_index(hw.cuda_driver) if hw.cuda else None
    if index:
        return f"pip install --force-reinstall torch --index-url {PYTORCH_INDEX}/{index}"
    if hw.cuda:
        return f"update the NVIDIA driver to 525 or newer, then: pip install torch --index-url {PYTORCH_INDEX}/cu124"
    return f"pip install torch --index-url {PYTORCH_INDEX}/cpu"


def cuda_index(driver: str) -> str | None:
    """The newest PyTorch CUDA index this driver runs: 12.8 needs 570+, 12.6 560+, 12.4 525+; None below."""
    try:
        major = int(driver.split(".")[0])
    except ValueError:
        return "cu124"  # driver version unknown: the most widely supported index
    return "cu128" if major >= 570 else "cu126" if major >= 560 else "cu124" if major >= 525 else None


def install_command(name: str, hw: Hardware) -> str:
    return {"torch": torch_install_command(hw), "mlx": 'pip install "swarm-app[mlx]"',
            "llama_cpp": 'pip install "swarm-app[llamacpp]"', "fake": ""}[name]


def engine_status(name: str, hw: Hardware) -> dict:
    """{name, installed, available, reason, install} for one engine, registered here or not."""
    missing = [m for m in ENGINE_MODULES[name] if importlib.util.find_spec(m) is None]
    status = {"name": name, "installed": not missing, "available": False, "reason": "", "install": ""}
    if missing:
        status.update(reason=f"{', '.join(missing)} not installed", install=install_command(name, hw))
    elif name not in registry.ENGINES:
        status["reason"] = f"installed, but this version of swarm-app has no {name} engine yet"
    else:
        ok, why = registry.backend_class(name).is_available(hw)
        status.update(available=ok, reason=why)
        if name == "torch" and hw.cuda and not registry.backend_class(name).runs_accelerated(hw):
            status["install"] = torch_install_command(hw)
    return status


def build_report(settings: Settings, hw: Hardware, pace: bool = False) -> dict:
    """The whole report. The model's recommended settings are applied to `settings` first (as a run does),
    so "run" shows the values `swarm run` will use."""
    engines = [engine_status(name, hw) for name in registry.KNOWN_ENGINES]
    resolved, model = _model(settings)
    try:
        chosen, reason = registry.choose(settings.model.backend, hw)
    except BackendError as exc:
        chosen, reason = None, str(exc)
    advice = sizing.recommend(hw, chosen or "torch")
    report = {
        "hardware": {**asdict(hw), "summary": hardware.describe(hw)},
        "backends": engines,
        "chosen": chosen,
        "reason": reason,
        # The sizing's own batch is left out: "run" has the I, L and length the run uses (after the
        # model's swarm.toml); a second set of figures here read as what a run would do, and was not.
        "recommended": {"threads": advice.threads, "model": advice.model.path or "(bundled)", "reason": advice.reason},
        "run": _run_settings(settings, advice, model, hw.cores),
        "model": model,
        "paths": _paths(settings),
        "listen": _listen(settings.peer.listen),
        "swarm": _swarm(settings),
        "pace": _pace(settings, hw, resolved) if pace and chosen else PACE_HINT,
    }
    from swarm_app.peer.core.config import is_dns_seed

    swarm = report["swarm"]
    typed = [a for a in dict.fromkeys(swarm["bootstrap"] + list(settings.peer.peers)) if not is_dns_seed(a)]
    targets = list(dict.fromkeys(typed + [a for seed in swarm["dns_seeds"] for a in seed["addresses"]]))
    report["peers"] = asyncio.run(_peers(targets, report["swarm"]["name"])) if targets else []
    report["reachability"] = _reachability(settings, report)
    report["failed"] = failed_checks(report, settings.peer.enabled)
    return report


def failed_checks(report: dict, joins_swarm: bool) -> list[str]:
    """The checks that failed, each as a few words naming what and why. The listen port counts only
    for a node that joins the swarm (`--offline` listens nowhere); peers count when none answers."""
    failed = []
    if report["chosen"] is None:
        failed.append(f"no engine runs here ({report['reason']})")
    if report["model"]["error"]:
        failed.append(f"model: {report['model']['error']}")
    listen = report["listen"]
    if joins_swarm and not listen["free"]:
        failed.append(f"listen {listen['address']} is not free ({listen['reason']})")
    peers = report["peers"]
    if peers and not any(peer["reachable"] for peer in peers):
        failed.append("no bootstrap or --peer address answers ("
                      + "; ".join(f"{p['address']}: {p['reason']}" for p in peers) + ")")
    return failed


def _swarm(settings: Settings) -> dict:
    """The swarm a node would join and where it would dial first (the addresses as typed: doctor diagnoses
    them rather than refusing them). A bad swarm name is a UsageError (exit 2), as for `swarm run`."""
    name = swarms.swarm_name(settings.peer.swarm, settings.tasks.preset)
    given = "peer.bootstrap" in settings.given
    bootstrap = list(settings.peer.bootstrap) if given else list(swarms.shipped_bootstrap(name))
    seeds = _dns_seeds(bootstrap + list(settings.peer.peers))
    return {"name": name, "bootstrap": bootstrap, "bootstrap_from": "settings" if given else "shipped with the app",
            "dns_seeds": seeds, "discovery": _discovery(settings, name, bootstrap, seeds)}


def _discovery(settings: Settings, name: str, bootstrap: list[str], seeds: list[dict] = ()) -> list[str]:
    """Where a node finds peers, one line each: the DHT (and what it reveals), mDNS, bootstrap, DNS seeds (when
    some are given), peer table."""
    from swarm_app.peer.core.config import is_dns_seed
    from swarm_app.peer.core.swarm_record import parse_public_key
    from swarm_app.peer.io.dht import status_line

    peer = settings.peer
    on = peer.enabled
    table = user_dirs().data / "peers.json"
    addresses = [a for a in bootstrap + list(peer.peers) if not is_dns_seed(a)]
    key = parse_public_key(peer.swarm_key) if peer.swarm_key else None
    return [status_line(on and peer.dht, name, key),
            "mDNS (this LAN): " + ("on" if on and peer.mdns else "off"),
            f"bootstrap and --peer: {len(addresses)} address(es)",
            *(seed["text"] for seed in seeds),
            "peer table: " + (f"{table}" if table.exists() else "none saved yet")]


def _dns_seeds(entries: list[str]) -> list[dict]:
    """Each `dns:` entry resolved once, as a node would at start: {"seed", "addresses", "text"} (the line that
    says what it found, or what is wrong with the entry or its records)."""
    from swarm_app.peer.core.config import check_dns_seed, is_dns_seed
    from swarm_app.peer.io import dns_seeds

    seeds, bad = [], []
    for entry in dict.fromkeys(e for e in entries if is_dns_seed(e)):
        try:
            seeds.append(check_dns_seed(entry, "DNS seed"))
        except UsageError as exc:
            bad.append({"seed": entry, "addresses": [], "text": str(exc)})

    async def resolve_all() -> list:
        return list(await asyncio.gather(*(dns_seeds.resolve(seed, DNS_TIMEOUT_S) for seed in seeds)))

    found = asyncio.run(resolve_all()) if seeds else []
    return bad + [{"seed": str(f.seed), "addresses": f.addresses, "text": f.summary()} for f in found]


def _reachability(settings: Settings, report: dict) -> dict:
    """Whether peers outside can dial this machine's listen port, by asking up to 3 answering peers of the
    same swarm to dial a throwaway probe server there; "checked" False says why it was not asked."""
    listen, port = report["listen"], _port_of(settings.peer.listen)
    helpers = [p["address"] for p in report["peers"] if p["reachable"] and p.get("swarm") == report["swarm"]["name"]]
    why_not = ("offline (--offline): nothing listens" if not settings.peer.enabled else
               f"the listen port is taken ({listen['reason']}): is a node running? its dashboard says" if not listen["free"]
               else "no peer of this swarm answered to dial it back (give --bootstrap HOST:PORT of a running node)"
               if not helpers else "")
    if why_not:
        return {"checked": False, "reachable": None, "port": port, "text": f"reachable from outside: not checked: {why_not}"}
    from swarm_app.peer.io.reachability import check_once

    try:
        found = asyncio.run(check_once(settings.peer.listen, helpers[:3]))
    except OSError as exc:
        return {"checked": False, "reachable": None, "port": port,
                "text": f"reachable from outside: not checked: cannot listen on {settings.peer.listen} ({exc.strerror or exc})"}
    reachable = True if found["confirmed"] else (False if found["failed"] else None)
    lan_only = bool(reachable) and not found["confirmed_from_internet"]
    text = swarms.reachability_text(reachable, found["port"], lan_only) if reachable is not None else \
        "reachable from outside: not known (no peer answered the dial-back request; older nodes do not)"
    return {"checked": True, "reachable": reachable, "lan_only": lan_only, "port": found["port"], **found, "text": text,
            "fix": swarms.reachability_fix(found["port"]) if reachable is False else ""}


def _port_of(address: str) -> int:
    try:
        return int(address.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return 0


def _run_settings(settings: Settings, advice: sizing.Recommendation, model: dict, cores: int) -> dict:
    """What `swarm run` will use: the settings after the model's swarm.toml, the resource level and threads."""
    t, m, r = settings.train, settings.model, settings.resources
    cap = limits(r.level, max(1, cores), r.threads, r.cpu_share)
    threads = m.threads or f"adapt within 1-{cap.max_threads} to what else runs"
    return {"local": t.local, "external": t.external, "completions": t.completions,
            "max_new_tokens": m.max_new_tokens, "temperature": m.temperature, "threads": threads,
            "level": r.level, "priority": f"nice {cap.nice}" if r.low_priority else "normal",
            "model_settings": model.get("recommended", {})}


def _pace(settings: Settings, hw: Hardware, model: ResolvedModel | SwarmError) -> dict | str:
    """Seconds per round at the run's I, L and completion length, on the engine and the thread count the run
    would use now: with adaptive threads, the fastest of the level's candidates in a one-question probe round
    each (the same choice the run's tuner makes). Then two probe rounds, 1 and 2 questions of L completions:
    a round costs a fixed part plus a part per question, so round(I) = t1 + (I - 1) x (t2 - t1)."""
    from backends.base import Sampling
    from swarm_app.kernel import tasks
    from swarm_app.training.loop import RoundPlan, Trainer

    try:
        if isinstance(model, SwarmError):
            raise model
        opened = open_engine(settings, hw, model=model)
    except SwarmError as exc:
        return f"not probed: {exc.message}"
    engine, t = opened.backend, settings.train
    specs = tasks.preset(settings.tasks.preset)
    sampling = Sampling(max_new_tokens=settings.model.max_new_tokens, temperature=settings.model.temperature)

    def probe(questions: int) -> float:
        trainer = Trainer(engine, RoundPlan(specs, questions, 0, t.completions, seed=questions, sampling=sampling))
        started = time.perf_counter()
        trainer.run_round(1)
        return time.perf_counter() - started

    try:
        engine.generate([tasks.regenerate(tasks.draw(specs, 0, 0, 1)[0]).messages()], 2,
                        Sampling(max_new_tokens=4, seed=0))  # warm-up: first-call costs are not the pace
        threads, by_count = _threads_now(settings, hw, engine, probe)
        took = [probe(1), probe(2)]
    finally:
        engine.close()
    round_s = max(took[0] + (t.local - 1) * max(took[1] - took[0], 0.0), 1e-3)
    chosen = (f"{threads} thread{'s' if threads > 1 else ''}" + (f", the fastest now of {by_count}" if by_count else ""))
    return {"round_s": round(round_s, 3), "rounds_per_hour": round(3600 / round_s), "probe_s": [round(x, 3) for x in took],
            "threads": threads, "threads_probed_s": by_count,
            "how": f"probe rounds of 1 and 2 questions x {t.completions} on {opened.name} at {chosen} "
                   f"({took[0]:.2f} s, {took[1]:.2f} s), extended to {t.local} questions"}


def _threads_now(settings: Settings, hw: Hardware, engine, probe) -> tuple[int, dict]:
    """The count the run would compute on now, and the one-question probe time of each count tried."""
    r = settings.resources
    cap = limits(r.level, max(1, hw.cores), r.threads, r.cpu_share).max_threads
    fixed = settings.model.threads
    if fixed or not engine.device().startswith("cpu") or not engine.set_threads(1):
        return fixed or cap, {}
    by_count = {}
    for count in candidates(cap):
        engine.set_threads(count)
        by_count[count] = round(probe(1), 3)
    best = min(by_count, key=by_count.get)
    engine.set_threads(best)
    return best, by_count


def _model(settings: Settings) -> tuple[ResolvedModel | SwarmError, dict]:
    """The model `--model` resolves to (or why not), with its recommended settings applied to `settings`."""
    try:
        resolved = prepare_model(settings)
    except SwarmError as exc:
        return exc, {"folder": None, "model_id": None, "error": exc.message}
    return resolved, {"folder": str(resolved.folder), "model_id": resolved.model_id, "error": None,
                      "recommended": read_recommendations(resolved.folder)}


def _paths(settings: Settings) -> dict:
    dirs = user_dirs()
    run = Path(settings.run.run_dir) if settings.run.run_dir else dirs.default_run
    return {"config_file": str(dirs.config_file), "data": str(dirs.data), "cache": str(dirs.cache),
            "run": str(run), "metrics_log": str(run / "metrics.jsonl")}


def _listen(address: str) -> dict:
    from swarm_app.peer.core.addressbook import parse_address
    from swarm_app.peer.io.ports import bind_error

    try:
        host, port = parse_address(address)
    except ValueError as exc:
        return {"address": address, "free": False, "reason": str(exc)}
    error = bind_error(host, port)
    reason = "" if error is None else (getattr(error, "strerror", None) or str(error))
    return {"address": address, "free": error is None, "reason": reason}


async def _peers(addresses: list[str], swarm: str) -> list[dict]:
    return list(await asyncio.gather(*(_reach(a, swarm) for a in addresses)))


async def _reach(address: str, swarm: str) -> dict:
    from swarm_app.peer.core.addressbook import parse_address

    try:
        host, port = parse_address(address)
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PEER_TIMEOUT_S)
    except ValueError as exc:
        return {"address": address, "reachable": False, "reason": str(exc)}
    except (OSError, asyncio.TimeoutError) as exc:
        return {"address": address, "reachable": False, "reason": getattr(exc, "strerror", None) or "no answer in 2 s"}
    writer.close()
    return {"address": address, "reachable": True, "reason": "", **await _versions(host, port, swarm)}


async def _read_to_end(reader: asyncio.StreamReader, limit: int) -> bytes:
    """What the peer sends until it closes (HTTP/1.0), at most `limit` bytes: one read() may stop
    after the headers."""
    raw = b""
    while len(raw) < limit and (chunk := await reader.read(limit - len(raw))):
        raw += chunk
    return raw


async def _versions(host: str, port: int, swarm: str) -> dict:
    """The peer's protocol and software versions and its swarm from GET /rsp/v1/info, and what to do when
    they differ. A plain HTTP/1.0 request on a stream (aiohttp is imported only for the dial-back check)."""

    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PEER_TIMEOUT_S)
        writer.write(f"GET /rsp/v1/info HTTP/1.0\r\nHost: {host}\r\n\r\n".encode("ascii"))
        raw = await asyncio.wait_for(_read_to_end(reader, 65536), PEER_TIMEOUT_S)
        writer.close()
        info = json.loads(raw.partition(b"\r\n\r\n")[2])
    except (OSError, asyncio.TimeoutError, ValueError):
        return {"protocol": None, "software": "", "update": "", "swarm": None}
    if not isinstance(info, dict):
        return {"protocol": None, "software": "", "update": "", "swarm": None}
    theirs, software = info.get("v"), str(info.get("software", ""))[:60]
    theirs_swarm = info.get("swarm") if isinstance(info.get("swarm"), str) else None
    return {"protocol": theirs, "software": software, "swarm": theirs_swarm and theirs_swarm[:64],
            "update": _version_advice(theirs, theirs_swarm, swarm)}


def _version_advice(theirs: object, theirs_swarm: str | None, swarm: str) -> str:
    """What to do about a peer that would not connect: another protocol version, a swarm-app from before
    swarm names, another swarm; "" when it would."""
    from swarm_app import __version__
    from swarm_app.peer import PROTOCOL_VERSION

    update = ""
    if isinstance(theirs, int) and theirs > PROTOCOL_VERSION:
        update = (f"it speaks protocol v{theirs}, this install v{PROTOCOL_VERSION} ({__version__}): update "
                  "(re-run install.sh / install.ps1, or pip install -U swarm-app)")
    elif isinstance(theirs, int) and theirs < PROTOCOL_VERSION:
        update = f"it speaks the older protocol v{theirs}: that node needs an update to swarm with this one"
    elif theirs_swarm is None:
        update = "it runs an older swarm-app (from before swarm names): that node needs an update to swarm with this one"
    elif theirs_swarm != swarm:
        update = f"it is in swarm {theirs_swarm!r}, this node joins {swarm!r}: they will not connect (--swarm {theirs_swarm})"
    return update


def format_text(report: dict) -> str:
    lines = [f"machine: {report['hardware']['summary']}", "engines:"]
    for e in report["backends"]:
        mark = "usable" if e["available"] else ("installed" if e["installed"] else "missing")
        lines.append(f"  {e['name']:10s} {mark:9s} {e['reason']}" + (f"  -> {e['install']}" if e["install"] else ""))
    lines.append(f"chosen: {report['chosen'] or 'none'} ({report['reason']})")
    lines.append(f"recommended: {report['recommended']['reason']}")
    run = report["run"]
    why = f" (the model's swarm.toml sets {', '.join(run['model_settings'])})" if run["model_settings"] else ""
    threads = f"{run['threads']} threads" if isinstance(run["threads"], int) else f"threads {run['threads']}"
    lines.append(f"run settings: I = {run['local']} questions, J = {run['external']} from peers, L = {run['completions']} "
                 f"completions, up to {run['max_new_tokens']} new tokens, {threads}{why}")
    lines.append(f"resources: level {run['level']}, {run['priority']} priority")
    model = report["model"]
    lines.append(f"model: {model['model_id']} in {model['folder']}" if model["folder"] else f"model: {model['error']}")
    lines += [f"{key.replace('_', ' ')}: {value}" for key, value in report["paths"].items()]
    listen = report["listen"]
    lines.append(f"listen {listen['address']}: " + ("free" if listen["free"] else f"not free ({listen['reason']})"))
    swarm = report["swarm"]
    bootstrap = ", ".join(swarm["bootstrap"]) or "none (none ships: the DHT finds the swarm by name where it is on; " \
        "else give one with --bootstrap HOST:PORT)"
    lines.append(f"swarm: {swarm['name']}; bootstrap ({swarm['bootstrap_from']}): {bootstrap}")
    lines.append("peers come from: " + "; ".join(swarm["discovery"]))
    reach = report["reachability"]
    lines.append(reach["text"] + (f"\n  {reach['fix']}" if reach.get("fix") else ""))
    for peer in report["peers"]:
        state = (f"reachable, {peer.get('software') or 'software unknown'}" if peer["reachable"]
                 else f"unreachable ({peer['reason']})")
        lines.append(f"peer {peer['address']}: {state}" + (f"; {peer['update']}" if peer.get("update") else ""))
    pace = report["pace"]
    lines.append(f"pace: {pace['round_s']} s per round, ~{pace['rounds_per_hour']} rounds per hour ({pace['how']})"
                 if isinstance(pace, dict) else f"pace: {pace}")
    return "\n".join(lines)
