"""Secret untrusted blocks kept out of a Temporal history in clear: sealed with a key the client and workers hold.

Temporal stores every workflow input and activity input in the workflow's history. A prompt's
block marked secret (``Prompt.untrusted(label, Secret(text))``) must not sit there readable, yet
the activity has to render the same prompt. Temporal's own answer is a payload codec; this one
is selective, so a history stays readable except where a secret is:

* the payload converter (:class:`SealingPayloadConverter`, deterministic, so it runs inside the
  workflow sandbox) writes each :class:`~ironflow.secrets.Secret` as ``{"ironflow.secret": text}``
  and marks the payload that holds one (metadata ``ironflow-secret``); it reads the same shape
  back as a ``Secret``;
* the codec (:class:`SealingCodec`, outside the sandbox, on the client and the worker) encrypts
  every marked payload whole with AES-256-GCM under the key (a fresh 96-bit nonce each time) and
  opens it again; unmarked payloads pass as they are.

The invariant: **a payload that holds a ``Secret`` leaves this process only sealed.** A workflow
that hands a secret block to a worker whose converter would not mark it is refused before anything
is scheduled (:mod:`ironflow.temporal.workflow`). Give the client and every worker the same
:func:`data_converter`; the key never appears in a payload, a message or a ``repr`` (the
metadata names it by a fingerprint).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    AdvancedJSONEncoder,
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    JSONTypeConverter,
    PayloadCodec,
)

from ironflow import errors
from ironflow.secrets import Secret

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "MARK",
    "SEALED_ENCODING",
    "SealingCodec",
    "SealingPayloadConverter",
    "data_converter",
    "holds_secret",
    "new_key",
]

#: The JSON key a ``Secret`` is written under inside a payload (before the codec seals it).
MARK: Final = "ironflow.secret"
#: The metadata key that marks a payload holding a ``Secret``: the codec seals exactly these.
_MARKED: Final = "ironflow-secret"
#: A sealed payload's encoding; its ``data`` is the nonce, then the sealed original payload.
SEALED_ENCODING: Final = "binary/ironflow-sealed"
_KEY_META: Final = "ironflow-key"
_KEY_BYTES: Final = 32
_NONCE_BYTES: Final = 12
_AAD: Final = SEALED_ENCODING.encode()  # binds the ciphertext to this format
_MARK_BYTES: Final = json.dumps(MARK).encode() + b":"
_KEY_HINT: Final = "a sealing key is 32 random bytes in base64: make one with ironflow.temporal.new_sealing_key()"


def new_key() -> Secret:
    """A fresh sealing key (32 random bytes, URL-safe base64), to store where client and workers read it."""
    return Secret(base64.urlsafe_b64encode(os.urandom(_KEY_BYTES)).decode())


def _key_bytes(key: Secret) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(key.reveal().strip().encode())
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != _KEY_BYTES:
        raise errors.ConfigError(_KEY_HINT)  # never the value itself
    return raw


class _SecretEncoder(AdvancedJSONEncoder):
    """Temporal's JSON encoder, plus ``Secret`` as ``{"ironflow.secret": text}`` (sealed by the codec)."""

    def default(self, o: Any) -> Any:
        if isinstance(o, Secret):
            return {MARK: o.reveal()}
        if dataclasses.is_dataclass(o) and not isinstance(o, type):  # one level: asdict would deep-copy a Secret
            return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
        return super().default(o)


def _secret_hook(obj: dict[str, Any]) -> Any:
    value = obj.get(MARK)
    return Secret(value) if len(obj) == 1 and isinstance(value, str) else obj


class _SecretDecoder(json.JSONDecoder):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(object_hook=_secret_hook, **kwargs)


class _SecretType(JSONTypeConverter):
    """A field typed ``Secret`` takes the ``Secret`` the decoder made, and nothing else."""

    def to_typed_value(self, hint: type, value: Any) -> Any:
        if hint is not Secret:
            return JSONTypeConverter.Unhandled
        if not isinstance(value, Secret):
            raise TypeError(f"expected a sealed secret, got {type(value).__name__}")
        return value


class _SecretJSON(JSONPlainPayloadConverter):
    """``json/plain`` as Temporal writes it, a ``Secret`` included and its payload marked."""

    def __init__(self) -> None:
        super().__init__(encoder=_SecretEncoder, decoder=_SecretDecoder, custom_type_converters=[_SecretType()])

    def to_payload(self, value: Any) -> Payload | None:
        payload = super().to_payload(value)
        if payload is not None and _MARK_BYTES in payload.data:  # every Secret is written with the mark
            payload.metadata[_MARKED] = b"1"
        return payload


class SealingPayloadConverter(CompositePayloadConverter):
    """Temporal's default payload converter, with ``Secret`` values written marked for sealing."""

    def __init__(self) -> None:
        plain = [c for c in DefaultPayloadConverter.default_encoding_payload_converters if c.encoding != "json/plain"]
        super().__init__(*plain, _SecretJSON())


def holds_secret(payload: Payload) -> bool:
    """True for a payload the converter marked (it holds a ``Secret``): one the codec must seal."""
    return payload.metadata.get(_MARKED) == b"1"


class SealingCodec(PayloadCodec):
    """AES-256-GCM over each marked payload, whole; everything else passes unchanged.

    Raises (from :meth:`decode`):
        ConfigError: a sealed payload this key cannot open (another key, or altered).
    """

    def __init__(self, key: Secret) -> None:
        # Here, not at import: workflow code imports this module, and a Temporal workflow sandbox
        # that re-imported cryptography's native bindings would fail.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        raw = _key_bytes(key)
        self._aead: AESGCM = AESGCM(raw)
        self.key_id = hashlib.sha256(raw).hexdigest()[:12]  # names the key, reveals nothing of it

    def __repr__(self) -> str:
        return f"SealingCodec(key_id={self.key_id!r})"

    def seal(self, payload: Payload) -> Payload:
        """``payload`` encrypted whole under a fresh nonce."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, payload.SerializeToString(), _AAD)
        return Payload(
            metadata={"encoding": SEALED_ENCODING.encode(), _KEY_META: self.key_id.encode()}, data=nonce + sealed
        )

    def open(self, payload: Payload) -> Payload:
        """The payload :meth:`seal` was given."""
        from cryptography.exceptions import InvalidTag

        try:
            clear = self._aead.decrypt(payload.data[:_NONCE_BYTES], payload.data[_NONCE_BYTES:], _AAD)
        except InvalidTag:
            sealed_by = payload.metadata.get(_KEY_META, b"?").decode(errors="replace")
            raise errors.ConfigError(
                f"a sealed payload (key {sealed_by}) does not open with this worker's key ({self.key_id}) or was "
                "altered: give the client and every worker the same sealing key"
            ) from None
        return Payload.FromString(clear)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.seal(p) if holds_secret(p) else p for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.open(p) if p.metadata.get("encoding") == SEALED_ENCODING.encode() else p for p in payloads]


def data_converter(key: Secret) -> DataConverter:
    """The data converter for the client and every worker: ``Secret`` values travel sealed under ``key``.

    Raises:
        ConfigError: ``key`` is not 32 bytes of base64 (:func:`new_key` makes one).
    """
    return dataclasses.replace(
        DataConverter.default, payload_converter_class=SealingPayloadConverter, payload_codec=SealingCodec(key)
    )
