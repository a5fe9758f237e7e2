"""The node's identity: one Ed25519 key, the node id derived from it, and where the key is kept.

The key lives in the OS keyring when a real backend exists, else in a 0600 PEM file in the user data
dir. keyring's `fail.Keyring` (headless Linux) and the `keyrings.alt` backends (base64 in a file) do
not count as real: a 0600 file is no worse than those. Every load says which store was used.
This module never prints or logs private key material, and knows nothing of networking.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from swarm_app.kernel.errors import UsageError
from swarm_app.kernel.files import write_bytes_atomic
from swarm_app.kernel.paths import user_dirs

log = logging.getLogger(__name__)

KEYRING_SERVICE = "swarm-app"
KEYRING_USER = "node-key"
KEY_FILE_NAME = "node-key.pem"


def b64url(data: bytes) -> str:
    """Unpadded base64url, the encoding of every key, nonce and signature on the wire."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    """Inverse of `b64url`; raises ValueError on anything that is not canonical unpadded base64url."""
    if not isinstance(text, str) or "=" in text or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if b64url(raw) != text:  # reject non-canonical encodings (stray low bits): one key, one spelling
        raise ValueError("non-canonical base64url")
    return raw


def node_id_of(public_key: bytes) -> str:
    """Node id: lowercase unpadded base32 of the first 20 bytes of SHA-256(raw 32-byte public key)."""
    return base64.b32encode(hashlib.sha256(public_key).digest()[:20]).decode("ascii").lower()


def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """True when `signature` is `public_key`'s Ed25519 signature of `message`; False for any bad input."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


class Identity:
    """An Ed25519 key pair. `repr` shows the node id only."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key: bytes = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.node_id: str = node_id_of(self.public_key)

    @classmethod
    def generate(cls) -> "Identity":
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes) -> "Identity":
        """Load an unencrypted PKCS#8 PEM Ed25519 key; UsageError for anything else."""
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"not an unencrypted PEM private key ({exc.__class__.__name__}); "
                             "use a file written by `swarm identity export`") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise UsageError("the key is not an Ed25519 key; use a file written by `swarm identity export`")
        return cls(key)

    def to_pem(self) -> bytes:
        return self._key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def __repr__(self) -> str:
        return f"Identity(node_id={self.node_id!r})"


@dataclass(frozen=True)
class LoadedIdentity:
    identity: Identity
    store: str
    """Where the key is kept, for humans: "OS keyring (<backend>)" or "file <path> (0600)"."""
    created: bool


def real_keyring():
    """The keyring backend when it is a real one (OS keychain, Secret Service...), else None."""
    try:
        import keyring
        from keyring.backends import chainer, fail
    except ImportError:
        return None
    backend = keyring.get_keyring()
    inner = list(backend.backends) if isinstance(backend, chainer.ChainerBackend) else [backend]
    usable = [b for b in inner
              if not isinstance(b, fail.Keyring) and not type(b).__module__.startswith("keyrings.alt")]
    return backend if usable and len(usable) == len(inner) else None


class IdentityStore:
    """Loads, creates and replaces the node key in the keyring or the 0600 key file."""

    def __init__(self, key_file: Path | None = None, use_keyring: bool = True, name: str = "") -> None:
        """`name`: a second key on this machine (`swarm run --gpus` gives each GPU's node "gpu-N");
        "" is the machine's one node key."""
        suffix = f"-{name}" if name else ""
        self.keyring_user = KEYRING_USER + suffix
        self.key_file = key_file or user_dirs().data / KEY_FILE_NAME.replace(".pem", f"{suffix}.pem")
        self.keyring = real_keyring() if use_keyring else None
        self.source: str | None = None
        """"keyring" or "file" once a key was loaded or saved."""

    def describe(self) -> str:
        if self.source == "keyring" or (self.source is None and self.keyring is not None):
            return f"OS keyring ({type(self.keyring).__name__})"
        return f"file {self.key_file} (0600)"

    def load(self) -> Identity | None:
        """The stored identity (keyring first, then the key file), or None when there is none yet."""
        if self.keyring is not None:
            text = self._keyring_call("get_password", KEYRING_SERVICE, self.keyring_user)
            if text is not None:
                self.source = "keyring"
                return Identity.from_pem(text.encode("ascii"))
        if not self.key_file.exists():  # also where a keyring-less earlier run left its key
            return None
        check_private_file(self.key_file)
        self.source = "file"
        return Identity.from_pem(self.key_file.read_bytes())

    def save(self, identity: Identity) -> None:
        """Store in the keyring when there is one (the key file, if any, is left alone), else in the file."""
        if self.keyring is not None:
            self._keyring_call("set_password", KEYRING_SERVICE, self.keyring_user, identity.to_pem().decode("ascii"))
            if self.keyring is not None:
                self.source = "keyring"
                return
        write_private_file(self.key_file, identity.to_pem())
        self.source = "file"

    def load_or_create(self) -> LoadedIdentity:
        identity = self.load()
        created = identity is None
        if identity is None:
            identity = Identity.generate()
            self.save(identity)
            log.info("created node identity %s in %s", identity.node_id, self.describe())
        return LoadedIdentity(identity, self.describe(), created)

    def _keyring_call(self, name: str, *args: str):
        """Call the keyring; on a keyring error fall back to the key file for the rest of this run."""
        from keyring.errors import KeyringError

        try:
            return getattr(self.keyring, name)(*args)
        except KeyringError as exc:
            log.warning("keyring %s failed (%s); using the key file %s instead",
                        type(self.keyring).__name__, exc.__class__.__name__, self.key_file)
            self.keyring = None
            return None


def write_private_file(path: Path, data: bytes) -> None:
    """Atomic write; mkstemp creates the temp file 0600 and the rename keeps that mode. On Windows,
    where mode bits mean nothing, the file's ACL is cut down to the current user instead."""
    write_bytes_atomic(path, data)
    if os.name != "nt":
        os.chmod(path, 0o600)
        return
    done = subprocess.run(owner_only_acl(path, os.environ.get("USERNAME", "")), capture_output=True, text=True)
    if done.returncode != 0:
        log.warning("could not limit %s to your user (icacls: %s); keep that folder private", path,
                    done.stderr.strip() or done.returncode)


def owner_only_acl(path: Path, user: str) -> list[str]:
    """The icacls command that leaves `user` the only one with access to `path` (no inherited entries)."""
    return ["icacls", str(path), "/inheritance:r", "/grant:r", f"{user or '*S-1-3-4'}:F"]


def check_private_file(path: Path) -> None:
    """Tighten a key file that others can read (POSIX only: Windows has no mode bits for this)."""
    if os.name == "nt":
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        log.warning("key file %s was readable by others (mode %o); setting it to 0600", path, mode)
        os.chmod(path, 0o600)
