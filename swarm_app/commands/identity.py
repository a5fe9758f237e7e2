"""`swarm identity show|export FILE|import FILE`: this node's key (swarm_app/peer/core/identity.py).

Output goes to the stream passed in (the CLI's stdout); the private key is only ever written to the
export file, never to a stream or a log. Errors are `UsageError`s for the CLI to print. Importing this
module is cheap (argparse only): the crypto modules load when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from swarm_app.kernel.errors import UsageError

if TYPE_CHECKING:
    from swarm_app.peer.core.identity import IdentityStore


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("identity", help="this node's key: show, export FILE, import FILE")
    parser.add_argument("action", choices=("show", "export", "import"),
                        help="show the node id; export the key to FILE; import the key from FILE")
    parser.add_argument("file", nargs="?", metavar="FILE", help="key file (PEM) for export and import")
    parser.add_argument("--force", action="store_true", help="import: replace an existing, different identity")
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace, out: TextIO | None = None, store: IdentityStore | None = None) -> int:
    from swarm_app.peer.core.identity import IdentityStore

    out = out or sys.stdout
    store = store or IdentityStore()
    if args.action == "show":
        return _show(store, out)
    if not args.file:
        raise UsageError(f"swarm identity {args.action} needs a FILE, e.g. swarm identity {args.action} node-key.pem")
    path = Path(args.file)
    if args.action == "export":
        return _export(store, path, out)
    return _import(store, path, args.force, out)


def _show(store: "IdentityStore", out: TextIO) -> int:
    from swarm_app.peer.core.identity import b64url

    loaded = store.load_or_create()
    identity = loaded.identity
    if loaded.created:
        out.write("created a new identity\n")
    out.write(f"node id     {identity.node_id}\n")
    out.write(f"public key  {b64url(identity.public_key)}\n")
    out.write(f"stored in   {loaded.store}\n")
    return 0


def _export(store: "IdentityStore", path: Path, out: TextIO) -> int:
    from swarm_app.peer.core.identity import write_private_file

    if path.exists():
        raise UsageError(f"{path} exists; choose a new file name (export never overwrites)")
    identity = store.load_or_create().identity
    try:
        write_private_file(path, identity.to_pem())
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}; check the folder and its permissions") from None
    out.write(f"exported identity {identity.node_id} to {path} (mode 0600; it is the private key: keep it safe)\n")
    return 0


def _import(store: "IdentityStore", path: Path, force: bool, out: TextIO) -> int:
    from swarm_app.peer.core.identity import Identity

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    identity = Identity.from_pem(data)
    current = store.load()
    if current is not None and current.node_id != identity.node_id and not force:
        raise UsageError(f"this machine already has identity {current.node_id}; importing would replace it "
                         "for good (export it first), then add --force")
    store.save(identity)
    out.write(f"imported identity {identity.node_id} into {store.describe()}\n")
    return 0
