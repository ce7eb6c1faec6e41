"""Encryption at rest: per-session data keys, wrapped by a master key from a key provider.

Every encrypted session has its own random 256-bit data key. Its payloads, blobs and snapshots
are sealed with AES-256-GCM under keys derived from it; the data key itself is stored only
wrapped (encrypted) by the provider's master key, in ``session_keys``. Destroying that row is
crypto-shredding: the ciphertext stays in the append-only log (so the hash chain, which covers
the ciphertext, still verifies) but no key exists to open it.

Payloads and blobs are sealed deterministically: the nonce is an HMAC of the content under a key
of its own (a synthetic IV), so the same event id and payload always seal to the same text. That
keeps idempotent appends working (a retry's ciphertext equals the stored one) and never reuses a
nonce for different content. Snapshots get random nonces: they are replaced, never compared.

``cryptography`` is imported only when a store actually encrypts (``sessionstore[encryption]``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import DataCorruptionError, EncryptionKeyError, ValidationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "BLOB_MAGIC",
    "PAYLOAD_PREFIX",
    "SNAPSHOT_MAGIC",
    "EnvKeyProvider",
    "FileKeyProvider",
    "KeyProvider",
    "MASTER_KEY_ENV",
    "LocalKeyProvider",
    "SessionCipher",
    "is_sealed_payload",
    "new_data_key",
]

#: Leads every sealed payload. A plaintext payload is a JSON object and starts with "{".
PAYLOAD_PREFIX = "sessionstore-sealed:v1:"
#: Lead sealed blob and snapshot bytes (a projection's dump never starts with a NUL byte).
BLOB_MAGIC = b"\x00sessionstore-sealed-blob:v1\x00"
SNAPSHOT_MAGIC = b"\x00sessionstore-sealed-snapshot:v1\x00"
_NONCE = 12
_KEY_BYTES = 32
#: The environment variable ``EnvKeyProvider`` reads by default (base64 of 32 bytes).
MASTER_KEY_ENV = "SESSIONSTORE_MASTER_KEY"


def _aesgcm(key: bytes) -> AESGCM:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as e:  # pragma: no cover - the encryption extra is missing
        msg = "encryption needs the 'cryptography' package: pip install 'sessionstore[encryption]'"
        raise EncryptionKeyError(msg) from e
    return AESGCM(key)


def new_data_key() -> bytes:
    """A fresh random data key."""
    return os.urandom(_KEY_BYTES)


@runtime_checkable
class KeyProvider(Protocol):
    """Wraps and unwraps data keys with a master key the database never holds.

    ``key_id`` names the master key that ``wrap`` uses now; it is stored beside each wrapped key
    and handed back to ``unwrap``, so a provider can keep older master keys for rotation. A KMS
    provider implements the same three members with its Encrypt/Decrypt calls, passing
    ``context`` as the encryption context (it binds a wrapped key to its session).
    """

    @property
    def key_id(self) -> str:
        """The id of the master key ``wrap`` uses."""
        ...

    def wrap(self, data_key: bytes, *, context: str) -> bytes:
        """``data_key`` encrypted under the master key, bound to ``context`` (the session id)."""
        ...

    def unwrap(self, wrapped: bytes, *, key_id: str, context: str) -> bytes:
        """The data key ``wrap`` sealed, with the master key ``key_id`` and the same ``context``.

        Raises:
            EncryptionKeyError: the key cannot be unwrapped (unknown key id, wrong context or key).
        """
        ...


class LocalKeyProvider:
    """A master key held by this process (32 bytes), wrapping with AES-256-GCM.

    Its ``key_id`` is ``local:`` and a fingerprint of the key (not the key): a store opened with
    another master key says so instead of failing to decrypt.
    """

    def __init__(self, master_key: bytes) -> None:
        if not isinstance(master_key, bytes) or len(master_key) != _KEY_BYTES:
            msg = f"a master key is {_KEY_BYTES} bytes (base64 of 32 random bytes in text form)"
            raise ValidationError(msg, field="master_key")
        self._key = master_key
        self._id = "local:" + hashlib.sha256(b"sessionstore-master-key" + master_key).hexdigest()[:16]

    @property
    def key_id(self) -> str:
        """``local:`` and the key's fingerprint."""
        return self._id

    def wrap(self, data_key: bytes, *, context: str) -> bytes:
        """See ``KeyProvider.wrap``."""
        nonce = os.urandom(_NONCE)
        return nonce + _aesgcm(self._key).encrypt(nonce, data_key, context.encode())

    def unwrap(self, wrapped: bytes, *, key_id: str, context: str) -> bytes:
        """See ``KeyProvider.unwrap``."""
        if key_id != self._id:
            msg = (
                f"session {context!r}: its key was wrapped by master key {key_id}, "
                f"this store has {self._id}"
            )
            raise EncryptionKeyError(msg)
        from cryptography.exceptions import InvalidTag

        try:
            return _aesgcm(self._key).decrypt(wrapped[:_NONCE], wrapped[_NONCE:], context.encode())
        except (InvalidTag, ValueError) as e:
            msg = f"session {context!r}: its wrapped data key does not open with master key {key_id}"
            raise EncryptionKeyError(msg) from e


def _decode_master_key(text: str, where: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != _KEY_BYTES:
        msg = f"{where}: a master key is base64 of 32 bytes (make one: openssl rand -base64 32)"
        raise EncryptionKeyError(msg)
    return key


class EnvKeyProvider(LocalKeyProvider):
    """The master key from an environment variable (base64), ``SESSIONSTORE_MASTER_KEY`` by default."""

    def __init__(self, variable: str = MASTER_KEY_ENV) -> None:
        value = os.environ.get(variable)
        if not value:
            raise EncryptionKeyError(f"the environment variable {variable} holds no master key")
        super().__init__(_decode_master_key(value, variable))


class FileKeyProvider(LocalKeyProvider):
    """The master key from a file (base64 text), e.g. a mounted secret."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        try:
            text = Path(path).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as e:
            raise EncryptionKeyError(f"cannot read the master key file {os.fspath(path)}: {e}") from e
        super().__init__(_decode_master_key(text, os.fspath(path)))


def is_sealed_payload(payload: str) -> bool:
    """True for a payload stored sealed."""
    return payload.startswith(PAYLOAD_PREFIX)


def _subkey(data_key: bytes, purpose: bytes) -> bytes:
    return hmac.new(data_key, b"sessionstore:" + purpose, hashlib.sha256).digest()


class SessionCipher:
    """Seals and opens one session's payloads, blobs and snapshots with its data key."""

    def __init__(self, session_id: str, data_key: bytes) -> None:
        self.session_id = session_id
        self._payload = _aesgcm(_subkey(data_key, b"payload"))
        self._blob = _aesgcm(_subkey(data_key, b"blob"))
        self._snapshot = _aesgcm(_subkey(data_key, b"snapshot"))
        self._siv = _subkey(data_key, b"synthetic-iv")
        self._blob_id = _subkey(data_key, b"blob-id")

    def _synthetic_nonce(self, *parts: bytes) -> bytes:
        mac = hmac.new(self._siv, digestmod=hashlib.sha256)
        for part in parts:
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.digest()[:_NONCE]

    def seal_payload(self, event_id: str, payload: str) -> str:
        """The stored text of ``payload``: deterministic for the same event id and payload."""
        data, aad = payload.encode(), event_id.encode()
        nonce = self._synthetic_nonce(b"payload", aad, data)
        sealed = nonce + self._payload.encrypt(nonce, data, aad)
        return PAYLOAD_PREFIX + base64.b64encode(sealed).decode("ascii")

    def open_payload(self, event_id: str, stored: str) -> str:
        """The plaintext of a sealed payload.

        Raises:
            DataCorruptionError: the text does not open with this key (altered, or moved).
        """
        from cryptography.exceptions import InvalidTag

        try:
            sealed = base64.b64decode(stored[len(PAYLOAD_PREFIX) :], validate=True)
            return self._payload.decrypt(sealed[:_NONCE], sealed[_NONCE:], event_id.encode()).decode()
        except (InvalidTag, ValueError, binascii.Error) as e:
            msg = f"session {self.session_id!r}: event {event_id} does not decrypt with the session's key"
            raise DataCorruptionError(msg, session_id=self.session_id) from e

    def blob_row_id(self, sha256: str) -> str:
        """The key a blob of this session is stored under: an HMAC of its SHA-256, so the
        database never holds a plain hash of the content (it would confirm a guessed file)."""
        return hmac.new(self._blob_id, sha256.encode(), hashlib.sha256).hexdigest()

    def seal_blob(self, blob_id: str, data: bytes) -> bytes:
        """The stored bytes of a blob (deterministic: the same blob stores once per session).

        ``blob_id`` is its ``blob_row_id``, bound as associated data."""
        aad = blob_id.encode()
        nonce = self._synthetic_nonce(b"blob", aad)
        return BLOB_MAGIC + nonce + self._blob.encrypt(nonce, data, aad)

    def open_blob(self, blob_id: str, stored: bytes) -> bytes | None:
        """The bytes of a sealed blob, or None when it is not this session's."""
        from cryptography.exceptions import InvalidTag

        body = stored[len(BLOB_MAGIC) :]
        try:
            return self._blob.decrypt(body[:_NONCE], body[_NONCE:], blob_id.encode())
        except (InvalidTag, ValueError):
            return None

    def seal_snapshot(self, label: str, state: bytes) -> bytes:
        """The stored bytes of a snapshot; ``label`` (its key and seq) is bound as associated data."""
        nonce = os.urandom(_NONCE)
        return SNAPSHOT_MAGIC + nonce + self._snapshot.encrypt(nonce, state, label.encode())

    def open_snapshot(self, label: str, stored: bytes) -> bytes | None:
        """The state of a sealed snapshot, or None when it does not open (a cache: readers rebuild)."""
        from cryptography.exceptions import InvalidTag

        body = stored[len(SNAPSHOT_MAGIC) :]
        try:
            return self._snapshot.decrypt(body[:_NONCE], body[_NONCE:], label.encode())
        except (InvalidTag, ValueError):
            return None


def check_key_provider(provider: Any) -> KeyProvider:
    """``provider`` if it has the ``KeyProvider`` members, else a ValidationError."""
    if not isinstance(provider, KeyProvider):
        msg = f"encryption must be a KeyProvider (key_id, wrap, unwrap), not {type(provider).__name__}"
        raise ValidationError(msg, field="encryption")
    return provider
