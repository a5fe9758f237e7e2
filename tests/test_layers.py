"""The architecture's arrow, checked on every module's imports (top level, inside functions and under
TYPE_CHECKING alike), as docs/architecture.md draws it:

    cli -> commands -> {tui, headless, watch}
           commands -> features (doctor, evaluation, export, identity, demo, multi_gpu, experiment)
                    -> session -> {training, peer/io -> peer/core} -> backends
    {peer/io, watch} -> net (the servers' door; aiohttp)
    kernel (events, settings, tasks, ...) below all of them; backends a leaf that never imports swarm_app.
    Nothing below the features imports one.

Also: nothing below net/ (the layers that may not import it: kernel, peer/core, training, backends, ...)
reaches aiohttp, directly or through a module of this repository that imports it, however far down;
and nothing outside tui/ imports textual.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FEATURES = ("experiment", "demo", "chat", "doctor", "evaluation", "export", "identity", "multi_gpu")
"""The commands' own work, each in its folder between the commands and the session: only the commands (and the
experiment, which runs the demo's nodes) import a feature."""

ALLOWED = {
    "cli": {"cli", "commands", "session", "kernel"},
    "commands": {"commands", "tui", "headless", "watch", *FEATURES, "session", "record", "kernel"},
    "tui": {"tui", "kernel"},
    "headless": {"headless", "kernel"},
    "watch": {"watch", "net", "kernel"},
    # the features: each command's own work, one folder each
    "experiment": {"experiment", "demo", "session", "training", "peer/io", "peer/core", "kernel", "backends"},
    "demo": {"demo", "session", "peer/io", "kernel", "backends"},
    "chat": {"chat", "session", "training", "kernel", "backends"},
    "doctor": {"doctor", "session", "resources", "training", "peer/io", "peer/core", "kernel", "backends"},
    "evaluation": {"evaluation", "session", "training", "kernel", "backends"},
    "export": {"export", "session", "training", "kernel", "backends"},
    "identity": {"identity", "peer/core", "kernel"},
    "multi_gpu": {"multi_gpu", "kernel"},
    # what every feature stands on
    "session": {"session", "resources", "record", "training", "peer/io", "peer/core", "kernel", "backends"},
    "record": {"record", "training", "kernel"},
    "resources": {"resources", "kernel"},
    "training": {"training", "kernel", "backends"},
    "peer/io": {"peer/io", "peer/core", "net", "kernel"},
    "net": {"net", "kernel"},
    "peer/core": {"peer/core", "kernel"},
    "kernel": {"kernel", "backends"},
    "backends": {"backends"},
}
"""Layer -> the layers it may import. Every layer may import itself; nothing imports upwards."""

NETWORK_LIBRARIES = {"aiohttp"}
"""Only the network shell (net/ and the layers that may import it) may reach these."""
TEXTUAL = {"textual", "textual_plotext"}


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name of this repository (None for anything else)."""
    parts = module.split(".")
    if parts[0] == "backends":
        return "backends"
    if parts[0] != "swarm_app":
        return None
    if len(parts) == 1:
        return "kernel"  # the package face: its version string
    if parts[1] == "peer":
        return "peer/io" if parts[2:3] == ["io"] else "peer/core"  # the package face holds constants only
    if parts[1] in ("cli", "__main__"):
        return "cli"
    return parts[1] if parts[1] in ALLOWED else None


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def imports_of(source: str, module: str) -> list[str]:
    """Every module `source` imports, resolved to dotted names (relative imports included)."""
    found = []
    package = module.split(".") if module else []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level] + ([base] if base else []))  # modules, not faces
            found.append(base)
            found += [f"{base}.{alias.name}" for alias in node.names]  # `from pkg import module`
    return found


def violations(source: str, module: str) -> list[str]:
    """What `source` (the module `module`) imports against the arrow, one line per import."""
    layer = layer_of(module)
    if layer is None:
        return []
    bad = []
    for target in imports_of(source, module):
        top = target.split(".")[0]
        if top in TEXTUAL and layer != "tui":
            bad.append(f"{module} imports {target}: only swarm_app/tui may import textual")
        if top in NETWORK_LIBRARIES and layer in BELOW_NET:
            bad.append(f"{module} imports {target}: the {layer} layer must not import {top} (only net/ and above)")
        target_layer = layer_of(target) if top in ("swarm_app", "backends") else None
        if target_layer is not None and target_layer not in ALLOWED[layer]:
            bad.append(f"{module} ({layer}) imports {target} ({target_layer})")
    return sorted(set(bad))


def layers_reached(layer: str) -> set[str]:
    """Every layer `layer` may import, directly or through the layers it may import."""
    reached, todo = set(), [layer]
    while todo:
        for other in ALLOWED[todo.pop()] - reached:
            reached.add(other)
            todo.append(other)
    return reached


BELOW_NET = {layer for layer in ALLOWED if "net" not in layers_reached(layer)}
"""The layers that may not import net/, not even through another layer: none of them may reach aiohttp."""


def network_paths(sources: dict[str, str]) -> list[str]:
    """For each module (dotted name -> source) of a layer below net/ that reaches aiohttp through modules of
    this repository, directly or however far down, one line with the chain of imports that gets there."""
    graph, direct = {}, {}
    for module, source in sources.items():
        targets = imports_of(source, module)
        graph[module] = sorted({t for t in targets if t in sources and t != module})
        direct[module] = sorted({t.split(".")[0] for t in targets} & NETWORK_LIBRARIES)
    found = []
    for module in sorted(sources):
        if layer_of(module) not in BELOW_NET:
            continue
        chain = _chain_to_network(module, graph, direct)
        if chain is not None:
            found.append(f"{module} ({layer_of(module)}) reaches {' -> '.join(chain)}")
    return found


def _chain_to_network(start: str, graph: dict[str, list[str]], direct: dict[str, list[str]]) -> list[str] | None:
    """The shortest import chain from `start` to a network library (breadth first), or None."""
    parents: dict[str, str | None] = {start: None}
    queue = [start]
    for module in queue:
        if direct[module]:
            chain = [direct[module][0]]
            node: str | None = module
            while node is not None:
                chain.insert(0, node)
                node = parents[node]
            return chain[1:]
        for target in graph[module]:
            if target not in parents:
                parents[target] = module
                queue.append(target)
    return None


def product_modules() -> list[Path]:
    return sorted([*(ROOT / "swarm_app").rglob("*.py"), *(ROOT / "backends").rglob("*.py")])


def test_every_module_has_a_layer():
    unplaced = [module_name(p) for p in product_modules() if layer_of(module_name(p)) is None]
    assert unplaced == [], "add these to a layer in tests/test_layers.py (and docs/architecture.md)"


def test_no_import_runs_against_the_arrow():
    found = [line for p in product_modules() for line in violations(p.read_text(encoding="utf-8"), module_name(p))]
    assert found == []


def test_nothing_below_net_reaches_aiohttp():
    sources = {module_name(p): p.read_text(encoding="utf-8") for p in product_modules()}
    assert network_paths(sources) == []
    assert {"kernel", "peer/core", "training", "backends", "resources"} <= BELOW_NET
    assert not {"net", "peer/io", "watch", "session"} & BELOW_NET


@pytest.mark.parametrize("layer_module", [
    "swarm_app.peer.core.protocol", "swarm_app.training.loop", "swarm_app.kernel.events", "backends.fake",
])
def test_the_check_catches_aiohttp_reached_through_the_repository(layer_module):
    """A module below net/ that imports a module of this repository which imports aiohttp two steps down fails."""
    helper = "backends.base" if layer_module.startswith("backends") else "swarm_app.kernel.files"
    deeper = "backends.chat" if layer_module.startswith("backends") else "swarm_app.kernel.paths"
    sources = {layer_module: f"import {helper}", helper: f"from {deeper} import x", deeper: "import aiohttp.web"}
    assert any(line.startswith(f"{layer_module} ") and line.endswith(f"{helper} -> {deeper} -> aiohttp")
               for line in network_paths(sources)), network_paths(sources)
    sources[deeper] = "import json"
    assert network_paths(sources) == []


@pytest.mark.parametrize("module, source", [
    ("backends.fake", "from swarm_app.kernel.errors import UsageError"),
    ("swarm_app.kernel.events", "import aiohttp"),
    ("swarm_app.training.loop", "from aiohttp import web"),
    ("swarm_app.peer.core.protocol", "from swarm_app.net.gate import ConnectionGate"),
    ("swarm_app.peer.core.protocol", "import aiohttp"),
    ("swarm_app.peer.core.protocol", "from swarm_app.peer.io.node import PeerNode"),
    ("swarm_app.tui.app", "def f():\n    from swarm_app.session.session import Session"),
    ("swarm_app.training.loop", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from swarm_app.peer.io import node"),
    ("swarm_app.kernel.events", "from swarm_app import session"),
    ("swarm_app.doctor.report", "import textual.app"),
    ("swarm_app.commands.run", "from backends import registry"),
    ("swarm_app.peer.core.stats", "from ..io import node"),
    ("swarm_app.session.session", "from swarm_app.demo.local_swarm import node_settings"),
    ("swarm_app.training.loop", "def f():\n    from swarm_app.evaluation import scoring"),
    ("swarm_app.demo.local_swarm", "from swarm_app.doctor.report import build_report"),
    ("swarm_app.multi_gpu.processes", "from swarm_app.session.session import Session"),
])
def test_the_check_catches_a_forbidden_import(module, source):
    assert violations(source, module), f"{source!r} in {module} should break the arrow"


@pytest.mark.parametrize("module, source", [
    ("swarm_app.commands.run", "from swarm_app.session.session import Session"),
    ("swarm_app.commands.doctor", "from swarm_app.doctor.report import build_report"),
    ("swarm_app.doctor.report", "from swarm_app.session.engine import open_engine"),
    ("swarm_app.session.session", "from swarm_app.peer.io.node import PeerNode"),
    ("swarm_app.peer.io.node", "import aiohttp\nfrom swarm_app.peer.core.protocol import NodeCore"),
    ("swarm_app.peer.io.server", "from swarm_app.net.gate import abort_transport"),
    ("swarm_app.watch.endpoint", "from swarm_app.net.gate import GatedSite"),
    ("swarm_app.net.gate", "import aiohttp\nfrom swarm_app.kernel.errors import SwarmError"),
    ("swarm_app.tui.app", "import textual.app\nfrom swarm_app.kernel.events import Event"),
])
def test_the_check_lets_the_arrow_through(module, source):
    assert violations(source, module) == []


def test_nothing_below_the_features_may_import_one():
    below = {layer: sorted(allowed & set(FEATURES)) for layer, allowed in ALLOWED.items()
             if layer not in ("cli", "commands", *FEATURES)}
    assert {layer: found for layer, found in below.items() if found} == {}
