"""Key ring and AES-256-GCM sealing of the credentials the PostgreSQL registry stores.

Each value gets a fresh random 96-bit nonce and is bound to its row by associated data
(the caller's choice: the registry passes the grant's id, credential kind and expiry),
so a ciphertext copied into another row, or a row whose kind or expiry was changed, no
longer opens. The ciphertext holds the 16-byte tag. The key version travels with the row, so keys rotate without a
flag day: new grants use the active key, old rows open with theirs until
``rotate-keys`` re-seals them. A row whose version is not in the ring cannot be
opened: :class:`MissingKeyVersion`; a value that does not open under its key (another
key at that version, another row's associated data, an altered ciphertext) raises
:class:`SealBroken`. The proxy answers both with 503, never 401.

Invariant: no error text, repr or log carries key material (keys print as ``1:***``).

>>> ring = KeyRing.from_spec("1:" + "00" * 32 + ", 2:" + "11" * 32)
>>> ring.active_version, ring
(2, KeyRing(1:***, 2:***, active=2))
>>> sealed = ring.seal(b"sk-ant-example", b"row-1")
>>> ring.open(sealed, b"row-1")
b'sk-ant-example'
>>> try:
...     ring.open(sealed, b"row-2")
... except SealBroken as exc:
...     print(exc.version)
2
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["KeyRing", "KeyRingError", "MissingKeyVersion", "SealBroken", "Sealed"]

_NONCE_BYTES = 12


class KeyRingError(ValueError):
    """The key ring spec cannot be used; the message never holds key material."""


class MissingKeyVersion(LookupError):
    """A sealed value names a key version the ring does not hold: add that key to the ring."""

    def __init__(self, version: int) -> None:
        self.version = version
        super().__init__(f"auth proxy grant uses key version {version} which is not configured")


class SealBroken(MissingKeyVersion):
    """The ring holds the version but the value does not open: a different key was configured
    under that version, or the row (ciphertext, id, kind, expiry) was altered.

    A subclass so every caller that answers a missing key with 503 answers this the same;
    its text names the other cause.
    """

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.args = (
            f"auth proxy grant does not open with key version {version}: "
            "the key differs from the one that sealed it, or the row was altered",
        )

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Sealed:
    """An encrypted value as stored: ciphertext (with tag), nonce and key version."""

    ciphertext: bytes = field(repr=False)
    nonce: bytes = field(repr=False)
    key_version: int


@dataclass(frozen=True)
class KeyRing:
    """Versioned 32-byte keys; ``active_version`` encrypts, any version decrypts."""

    keys: Mapping[int, bytes] = field(repr=False)
    active_version: int

    def __repr__(self) -> str:
        versions = ", ".join(f"{v}:***" for v in sorted(self.keys))
        return f"KeyRing({versions}, active={self.active_version})"

    @classmethod
    def from_spec(cls, spec: str, active: int | None = None) -> KeyRing:
        """Parse ``version:hex,version:hex`` (64 hex chars per key; blank entries skipped)."""
        keys: dict[int, bytes] = {}
        for position, entry in enumerate(spec.split(","), start=1):
            entry = entry.strip()
            if not entry:
                continue
            version_text, sep, hex_key = entry.partition(":")
            if not sep:
                raise KeyRingError(f"key ring entry #{position} must be version:hex (e.g. 1:***)")
            try:
                version = int(version_text.strip())
            except ValueError:
                raise KeyRingError(f"key ring entry #{position} has a version that is not an integer") from None
            if version < 1 or version > 2**31 - 1:
                raise KeyRingError(f"key ring entry #{position}: version must be a positive 32-bit integer")
            hex_key = hex_key.strip()
            try:
                key = bytes.fromhex(hex_key)
            except ValueError:
                key = b""
            if len(hex_key) != 64 or len(key) != 32:
                raise KeyRingError(f"key {version}:*** must be exactly 64 hex characters (32 bytes)")
            if version in keys:
                raise KeyRingError(f"key version {version} appears twice in the key ring")
            keys[version] = key
        if not keys:
            raise KeyRingError("the key ring is empty: give at least one version:hex key")
        return cls._with_active(keys, active)

    @classmethod
    def from_legacy(cls, hex_key: str, active: int | None = None) -> KeyRing:
        """``IRONFLOW_SECRET_KEY``: one key at version 1, or at the active version if given."""
        version = active if active is not None else 1
        return cls.from_spec(f"{version}:{hex_key}", active)

    @classmethod
    def _with_active(cls, keys: dict[int, bytes], active: int | None) -> KeyRing:
        if active is None:
            return cls(keys, max(keys))
        if active < 1:
            raise KeyRingError("the active key version must be a positive integer")
        if active not in keys:
            raise KeyRingError(f"the active key version {active} is not in the key ring")
        return cls(keys, active)

    def seal(self, plaintext: bytes, associated: bytes | None) -> Sealed:
        """Encrypt under the active key with a fresh random nonce, bound to ``associated``."""
        nonce = os.urandom(_NONCE_BYTES)
        ciphertext = AESGCM(self.keys[self.active_version]).encrypt(nonce, plaintext, associated)
        return Sealed(ciphertext, nonce, self.active_version)

    def open(self, sealed: Sealed, associated: bytes | None) -> bytes:
        """Decrypt with the key of ``sealed.key_version``; ``associated`` must be what sealed it.

        Raises:
            MissingKeyVersion: the version is not in the ring.
            SealBroken: the tag does not verify (wrong key, other associated data, altered bytes).
        """
        key = self.keys.get(sealed.key_version)
        if key is None:
            raise MissingKeyVersion(sealed.key_version)
        try:
            return AESGCM(key).decrypt(sealed.nonce, sealed.ciphertext, associated)
        except InvalidTag:
            raise SealBroken(sealed.key_version) from None
