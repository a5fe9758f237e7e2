"""`swarm identity show|export FILE|import FILE`: this node's key.

Owns the flags; swarm_app/identity/key.py does the work. Importing this module is cheap (argparse
only): the crypto modules load when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from swarm_app.kernel.errors import UsageError

if TYPE_CHECKING:
    from swarm_app.identity.key import IdentityStore


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("identity", help="this node's key: show, export FILE, import FILE")
    actions = parser.add_subparsers(dest="action", metavar="show|export|import", required=True)
    actions.add_parser("show", help="show the node id")
    export = actions.add_parser("export", help="write the key to FILE (PEM, mode 0600)")
    load = actions.add_parser("import", help="make the key in FILE this node's")
    for sub in (export, load):
        # nargs="?": a missing FILE gets this command's own one-line error, with an example
        sub.add_argument("file", nargs="?", metavar="FILE", help="key file (PEM)")
    # --force before or after FILE (each parser takes what follows its name): `import --force FILE` too
    load.add_argument("--force", action="store_true", default=argparse.SUPPRESS,
                      help="replace an existing, different identity")
    parser.add_argument("--force", action="store_true", help="import: replace an existing, different identity")
    parser.set_defaults(handler=main, file=None)


def main(args: argparse.Namespace, out: TextIO | None = None, store: IdentityStore | None = None) -> int:
    from swarm_app.identity import key

    out = out or sys.stdout
    store = store or key.IdentityStore()
    if args.action == "show":
        return key.show(store, out)
    if not args.file:
        raise UsageError(f"swarm identity {args.action} needs a FILE, e.g. swarm identity {args.action} node-key.pem")
    path = Path(args.file)
    if args.action == "export":
        return key.export(store, path, out)
    return key.import_key(store, path, args.force, out)
