"""The service's Ed25519 signing key: it signs what leaves the service for someone who trusts only its public
key (the regulator bundle's manifest), beside the HMAC that only the service itself can check.

The key is a PEM (PKCS#8, unencrypted) file named by AUDITOR_SIGNING_KEY_FILE; `auditor keys gen-signing-key`
writes one. Production refuses to sign without it. In development and test a key is made on first use in the
data directory (the SQLite database's folder, else ./var), so every process on the same store signs alike.
The file is read when something is first signed, not when the service starts.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.engine import make_url

DEFAULT_FILE_NAME = "ed25519-signing-key.pem"


class SigningKeyError(RuntimeError):
    """No usable signing key (not configured in production, unreadable, or not an Ed25519 key)."""


class SigningKey:
    """An Ed25519 private key and what is published of it."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        self.public_bytes = private.public_key().public_bytes(serialization.Encoding.Raw,
                                                              serialization.PublicFormat.Raw)

    @property
    def public_hex(self) -> str:
        return self.public_bytes.hex()

    @property
    def fingerprint(self) -> str:
        """A short name for the public key (the first 16 hex digits of its SHA-256)."""
        return hashlib.sha256(self.public_bytes).hexdigest()[:16]

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)

    def load(self) -> SigningKey:
        return self


class SigningKeyFile:
    """Where the key lives; read (or, outside production, made) on first use and then kept."""

    def __init__(self, path: Path | None, *, environment: str, data_dir: Path) -> None:
        self.path, self.environment, self.data_dir = path, environment, data_dir
        self._key: SigningKey | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_settings(cls, signing_key_file: Path | None, *, environment: str, database_url: str) -> SigningKeyFile:
        return cls(signing_key_file, environment=environment, data_dir=data_dir(database_url))

    def load(self) -> SigningKey:
        with self._lock:
            if self._key is None:
                self._key = self._read()
            return self._key

    def _read(self) -> SigningKey:
        path = self.path
        if path is None:
            if self.environment == "production":
                raise SigningKeyError("AUDITOR_SIGNING_KEY_FILE must be set in production: bundles are signed with "
                                      "it (`auditor keys gen-signing-key FILE` writes one)")
            path = self.data_dir / DEFAULT_FILE_NAME
            if not path.exists():
                write_new_key(path, exist_ok=True)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise SigningKeyError(f"cannot read the signing key {path}: {exc.strerror or exc}") from exc
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise SigningKeyError(f"{path} is not an unencrypted PEM private key") from exc
        if not isinstance(private, Ed25519PrivateKey):
            raise SigningKeyError(f"{path} holds a {type(private).__name__}, not an Ed25519 key")
        return SigningKey(private)


def data_dir(database_url: str) -> Path:
    """The SQLite database's folder, else ./var (where the service keeps its other local state)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return Path(url.database).resolve().parent
    return Path("var").resolve()


def write_new_key(path: Path, *, exist_ok: bool = False) -> SigningKey:
    """A new key in `path`, readable by its owner only; with `exist_ok`, a key another process wrote first
    is kept."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    # Written aside, then linked into place: a reader never sees half a key, and a key is never overwritten.
    staging = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(pem)
        os.link(staging, path)
    except FileExistsError:
        if exist_ok:
            return SigningKey(private)   # another process made it first: the caller reads that one
        raise SigningKeyError(f"{path} exists: a signing key is never overwritten") from None
    except OSError as exc:
        raise SigningKeyError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        staging.unlink(missing_ok=True)
    return SigningKey(private)
