"""The sealing data converter: a payload holding a ``Secret`` leaves only encrypted, under the key
the client and workers share; everything else stays as Temporal writes it."""

from __future__ import annotations

import base64

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter

from ironflow import errors
from ironflow.prompts import Prompt
from ironflow.secrets import Secret
from ironflow.temporal import new_sealing_key, requests, sealed_data_converter, sealing

BODY = "PRIVATE-ISSUE-BODY-0451"


def _request() -> requests.AgentRequest:
    config = Prompt("Summarise.").untrusted("issue", Secret(BODY)).config(model="haiku")
    return requests.AgentRequest.of("summary", config, root_workflow_id="review-1")


async def test_a_payload_holding_a_secret_is_sealed_whole_and_opens_to_the_same_request() -> None:
    converter = sealed_data_converter(new_sealing_key())
    request = _request()
    sealed, plain = await converter.encode([request, {"change": "add retries"}])
    assert sealed.metadata["encoding"] == sealing.SEALED_ENCODING.encode()
    assert BODY.encode() not in sealed.SerializeToString()
    assert b"summary" not in sealed.data  # the whole input, not only the secret, is sealed
    assert (plain.metadata["encoding"], plain.data) == (b"json/plain", b'{"change":"add retries"}')

    back, again = await converter.decode([sealed, plain], [requests.AgentRequest, dict])
    assert again == {"change": "add retries"}
    assert isinstance(back, requests.AgentRequest)
    config = back.agent_config("review-1")
    assert config.prompt == request.agent_config("review-1").prompt
    assert BODY in config.prompt
    assert [v.reveal() for v in config.secret_values] == [BODY]
    assert config.model == "haiku"


async def test_a_secret_inside_a_plain_value_is_sealed_and_read_back_as_a_secret() -> None:
    """The client's workflow input: ``{"issue": Secret(...)}`` travels sealed too."""
    converter = sealed_data_converter(new_sealing_key())
    (payload,) = await converter.encode([{"steps": [{"untrusted": Secret(BODY)}]}])
    assert BODY.encode() not in payload.SerializeToString()
    (value,) = await converter.decode([payload])
    secret = value["steps"][0]["untrusted"]
    assert isinstance(secret, Secret)
    assert secret.reveal() == BODY


async def test_each_seal_draws_a_fresh_nonce() -> None:
    codec = sealing.SealingCodec(new_sealing_key())
    payload = sealing.SealingPayloadConverter().to_payload(Secret(BODY))
    assert sealing.holds_secret(payload)
    first, second = codec.seal(payload), codec.seal(payload)
    assert first.data != second.data
    assert codec.open(first) == codec.open(second) == payload


def test_text_that_only_looks_like_the_mark_is_not_taken_for_a_secret() -> None:
    converter = sealing.SealingPayloadConverter()
    payload = converter.to_payload({"note": '{"ironflow.secret": "x"}'})
    assert not sealing.holds_secret(payload)
    assert converter.from_payload(payload) == {"note": '{"ironflow.secret": "x"}'}


def test_another_key_or_an_altered_payload_does_not_open_and_the_message_names_no_key() -> None:
    key, other = new_sealing_key(), new_sealing_key()
    codec = sealing.SealingCodec(key)
    sealed = codec.seal(sealing.SealingPayloadConverter().to_payload(Secret(BODY)))
    with pytest.raises(errors.ConfigError, match="same sealing key") as caught:
        sealing.SealingCodec(other).open(sealed)
    assert key.reveal() not in str(caught.value)
    assert other.reveal() not in str(caught.value)
    assert codec.key_id in str(caught.value)
    altered = Payload(metadata=sealed.metadata, data=sealed.data[:-1] + bytes([sealed.data[-1] ^ 1]))
    with pytest.raises(errors.ConfigError, match="altered"):
        codec.open(altered)


@pytest.mark.parametrize("raw", ["", "not base64 at all!", base64.urlsafe_b64encode(b"short").decode()])
def test_a_key_that_is_not_32_bytes_of_base64_is_refused_without_echoing_it(raw: str) -> None:
    with pytest.raises(errors.ConfigError, match="32 random bytes") as caught:
        sealed_data_converter(Secret(raw))
    assert not raw or raw not in str(caught.value)


def test_the_codec_s_repr_names_the_key_by_fingerprint_only() -> None:
    key = new_sealing_key()
    codec = sealing.SealingCodec(key)
    assert key.reveal() not in repr(codec)
    assert codec.key_id in repr(codec)
    assert isinstance(sealed_data_converter(key), DataConverter)
