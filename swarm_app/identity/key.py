"""`swarm identity`'s work: show, export and import this node's key (kept by swarm_app/peer/core/identity.py).

Output goes to the stream passed in (the CLI's stdout); the private key is only ever written to the
export file, never to a stream or a log. Errors are `UsageError`s for the CLI to print.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from swarm_app.kernel.errors import UsageError
from swarm_app.peer.core.identity import Identity, IdentityStore, b64url, write_private_file

__all__ = ["IdentityStore", "export", "import_key", "show"]


def show(store: IdentityStore, out: TextIO) -> int:
    loaded = store.load_or_create()
    identity = loaded.identity
    if loaded.created:
        out.write("created a new identity\n")
    out.write(f"node id     {identity.node_id}\n")
    out.write(f"public key  {b64url(identity.public_key)}\n")
    out.write(f"stored in   {loaded.store}\n")
    return 0


def export(store: IdentityStore, path: Path, out: TextIO) -> int:
    if path.exists():
        raise UsageError(f"{path} exists; choose a new file name (export never overwrites)")
    identity = store.load_or_create().identity
    try:
        write_private_file(path, identity.to_pem())
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}; check the folder and its permissions") from None
    out.write(f"exported identity {identity.node_id} to {path} (mode 0600; it is the private key: keep it safe)\n")
    return 0


def import_key(store: IdentityStore, path: Path, force: bool, out: TextIO) -> int:
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
