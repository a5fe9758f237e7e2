"""The architecture's arrow, checked on every module's imports (top level, inside functions and under
TYPE_CHECKING alike), as docs/architecture.md draws it:

    cli -> commands -> {tui, headless, watch}
           commands -> session -> {training, peer/io -> peer/core} -> backends
    kernel (events, settings, tasks, ...) below all of them; backends a leaf that never imports swarm_app.

Also: the sans-IO peer core never imports aiohttp, and nothing outside tui/ imports textual.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ALLOWED = {
    "cli": {"cli", "commands", "session", "kernel"},
    "commands": {"commands", "tui", "headless", "watch", "experiment", "chat", "session", "kernel"},
    "chat": {"chat", "session", "training", "kernel", "backends"},
    "tui": {"tui", "kernel"},
    "headless": {"headless", "kernel"},
    "watch": {"watch", "kernel"},
    "experiment": {"experiment", "session", "training", "peer/io", "peer/core", "kernel", "backends"},
    "session": {"session", "resources", "training", "peer/io", "peer/core", "kernel", "backends"},
    "resources": {"resources", "kernel"},
    "training": {"training", "kernel", "backends"},
    "peer/io": {"peer/io", "peer/core", "kernel"},
    "peer/core": {"peer/core", "kernel"},
    "kernel": {"kernel", "backends"},
    "backends": {"backends"},
}
"""Layer -> the layers it may import. Every layer may import itself; nothing imports upwards."""

FORBIDDEN_LIBRARIES = {"peer/core": {"aiohttp"}}
"""Third-party packages a layer must not import (the peer core is sans-IO)."""
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
        if top in FORBIDDEN_LIBRARIES.get(layer, ()):
            bad.append(f"{module} imports {target}: the {layer} layer must not import {top}")
        target_layer = layer_of(target) if top in ("swarm_app", "backends") else None
        if target_layer is not None and target_layer not in ALLOWED[layer]:
            bad.append(f"{module} ({layer}) imports {target} ({target_layer})")
    return sorted(set(bad))


def product_modules() -> list[Path]:
    return sorted([*(ROOT / "swarm_app").rglob("*.py"), *(ROOT / "backends").rglob("*.py")])


def test_every_module_has_a_layer():
    unplaced = [module_name(p) for p in product_modules() if layer_of(module_name(p)) is None]
    assert unplaced == [], "add these to a layer in tests/test_layers.py (and docs/architecture.md)"


def test_no_import_runs_against_the_arrow():
    found = [line for p in product_modules() for line in violations(p.read_text(encoding="utf-8"), module_name(p))]
    assert found == []


@pytest.mark.parametrize("module, source", [
    ("backends.fake", "from swarm_app.kernel.errors import UsageError"),
    ("swarm_app.peer.core.protocol", "import aiohttp"),
    ("swarm_app.peer.core.protocol", "from swarm_app.peer.io.node import PeerNode"),
    ("swarm_app.tui.app", "def f():\n    from swarm_app.session.session import Session"),
    ("swarm_app.training.loop", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from swarm_app.peer.io import node"),
    ("swarm_app.kernel.events", "from swarm_app import session"),
    ("swarm_app.session.doctor", "import textual.app"),
    ("swarm_app.commands.run", "from backends import registry"),
    ("swarm_app.peer.core.stats", "from ..io import node"),
])
def test_the_check_catches_a_forbidden_import(module, source):
    assert violations(source, module), f"{source!r} in {module} should break the arrow"


@pytest.mark.parametrize("module, source", [
    ("swarm_app.commands.run", "from swarm_app.session.session import Session"),
    ("swarm_app.session.session", "from swarm_app.peer.io.node import PeerNode"),
    ("swarm_app.peer.io.node", "import aiohttp\nfrom swarm_app.peer.core.protocol import NodeCore"),
    ("swarm_app.tui.app", "import textual.app\nfrom swarm_app.kernel.events import Event"),
])
def test_the_check_lets_the_arrow_through(module, source):
    assert violations(source, module) == []
