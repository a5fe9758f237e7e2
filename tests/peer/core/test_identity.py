"""Identity: node id derivation, the key stores (keyring or 0600 file), and `swarm identity`."""

from __future__ import annotations

import argparse
import io
import logging
import os
import stat

import keyring.errors
import pytest

from swarm_app.cli import build_parser
from swarm_app.commands.identity import main as identity_main
from swarm_app.kernel.errors import UsageError
from swarm_app.peer.core import identity as identity_mod
from swarm_app.peer.core.identity import Identity, IdentityStore, b64url, node_id_of, unb64url


class MemoryKeyring:
    """A stand-in for an OS keyring. Not a KeyringBackend subclass: those register themselves globally."""

    def __init__(self, fail: bool = False) -> None:
        self.store: dict[tuple[str, str], str] = {}
        self.fail = fail

    def get_password(self, service, username):
        if self.fail:
            raise keyring.errors.KeyringError("locked")
        return self.store.get((service, username))

    def set_password(self, service, username, password):
        if self.fail:
            raise keyring.errors.PasswordSetError("locked")
        self.store[(service, username)] = password

    def delete_password(self, service, username):
        self.store.pop((service, username), None)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["identity", *argv])


def test_node_id_is_32_lowercase_base32_chars_of_the_key_hash():
    ident = Identity.generate()
    assert len(ident.node_id) == 32 and ident.node_id == ident.node_id.lower()
    assert set(ident.node_id) <= set("abcdefghijklmnopqrstuvwxyz234567")
    assert node_id_of(ident.public_key) == ident.node_id
    assert Identity.generate().node_id != ident.node_id
    assert ident.node_id in repr(ident) and "PRIVATE" not in repr(ident)


def test_b64url_rejects_padding_and_noncanonical_spellings():
    raw = bytes(range(32))
    assert unb64url(b64url(raw)) == raw
    for bad in (b64url(raw) + "=", "A", "AB=", "AR"):  # "AR": stray low bits, not canonical
        with pytest.raises(ValueError):
            unb64url(bad)


def test_headless_linux_has_no_real_keyring():
    assert identity_mod.real_keyring() is None  # fail.Keyring on this machine


def test_file_store_is_0600_and_reloads_the_same_identity(isolated_home):
    store = IdentityStore()
    loaded = store.load_or_create()
    assert loaded.created and loaded.store.startswith("file ")
    path = isolated_home / "data" / "node-key.pem"
    assert path.exists() and stat.S_IMODE(path.stat().st_mode) == 0o600
    again = IdentityStore().load_or_create()
    assert not again.created and again.identity.node_id == loaded.identity.node_id


def test_a_key_file_readable_by_others_is_tightened(isolated_home):
    IdentityStore().load_or_create()
    path = isolated_home / "data" / "node-key.pem"
    os.chmod(path, 0o644)
    IdentityStore().load()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_real_keyring_is_used_when_present(monkeypatch, isolated_home):
    ring = MemoryKeyring()
    monkeypatch.setattr(identity_mod, "real_keyring", lambda: ring)
    loaded = IdentityStore().load_or_create()
    assert loaded.store == "OS keyring (MemoryKeyring)"
    assert not (isolated_home / "data" / "node-key.pem").exists()
    assert IdentityStore().load().node_id == loaded.identity.node_id


def test_a_key_file_from_before_the_keyring_is_kept(monkeypatch, isolated_home):
    old = IdentityStore().load_or_create().identity  # headless: file
    monkeypatch.setattr(identity_mod, "real_keyring", lambda: MemoryKeyring())
    loaded = IdentityStore().load_or_create()
    assert not loaded.created and loaded.identity.node_id == old.node_id and loaded.store.startswith("file ")


def test_keyring_failure_falls_back_to_the_file(monkeypatch, isolated_home, caplog):
    monkeypatch.setattr(identity_mod, "real_keyring", lambda: MemoryKeyring(fail=True))
    store = IdentityStore()
    loaded = store.load_or_create()
    assert loaded.store.startswith("file ") and (isolated_home / "data" / "node-key.pem").exists()
    assert "keyring" in caplog.text


def test_keyrings_alt_counts_as_no_keyring(monkeypatch):
    import keyring

    fake_alt = type("PlaintextKeyring", (MemoryKeyring,), {"__module__": "keyrings.alt.file"})
    monkeypatch.setattr(keyring, "get_keyring", lambda: fake_alt())
    assert identity_mod.real_keyring() is None
    monkeypatch.setattr(keyring, "get_keyring", lambda: MemoryKeyring())
    assert isinstance(identity_mod.real_keyring(), MemoryKeyring)


def test_show_export_import_round_trip_without_leaking_the_key(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    out = io.StringIO()
    assert identity_main(parse("show"), out) == 0
    node_id = IdentityStore().load().node_id
    assert node_id in out.getvalue() and "PRIVATE" not in out.getvalue()

    exported = tmp_path / "key.pem"
    assert identity_main(parse("export", str(exported)), out) == 0
    assert stat.S_IMODE(exported.stat().st_mode) == 0o600
    pem = exported.read_bytes()
    with pytest.raises(UsageError, match="exists"):
        identity_main(parse("export", str(exported)), out)

    other = Identity.generate()
    other_file = tmp_path / "other.pem"
    other_file.write_bytes(other.to_pem())
    with pytest.raises(UsageError, match="--force"):
        identity_main(parse("import", str(other_file)), out)
    assert identity_main(parse("import", str(other_file), "--force"), out) == 0
    assert IdentityStore().load().node_id == other.node_id
    assert identity_main(parse("import", str(exported), "--force"), out) == 0
    assert IdentityStore().load().node_id == node_id

    secret_lines = [line for line in pem.decode().splitlines() if "-----" not in line]
    for text in (out.getvalue(), caplog.text):
        assert "PRIVATE KEY" not in text
        assert not any(line in text for line in secret_lines)


def test_import_rejects_junk_and_export_needs_a_file(tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    with pytest.raises(UsageError, match="PEM"):
        identity_main(parse("import", str(junk)), io.StringIO())
    with pytest.raises(UsageError, match="needs a FILE"):
        identity_main(parse("export"), io.StringIO())
    with pytest.raises(UsageError, match="cannot read"):
        identity_main(parse("import", str(tmp_path / "missing.pem")), io.StringIO())


def test_on_windows_the_key_file_acl_is_cut_to_the_user():
    from pathlib import Path

    from swarm_app.peer.core.identity import owner_only_acl

    assert owner_only_acl(Path("C:/Users/ann/key.pem"), "ann") == [
        "icacls", str(Path("C:/Users/ann/key.pem")), "/inheritance:r", "/grant:r", "ann:F"]
    assert owner_only_acl(Path("k.pem"), "")[-1] == "*S-1-3-4:F"  # the owner's SID when USERNAME is unset
