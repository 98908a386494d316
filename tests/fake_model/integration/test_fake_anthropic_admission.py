"""The fake Anthropic API admits /v1/messages and count_tokens alike: key first, then a JSON object body."""

from __future__ import annotations

import json

import aiohttp
import pytest

from ironflow.fake_model import FakeAnthropic
from ironflow.secrets import Secret

PATHS = ["/v1/messages", "/v1/messages/count_tokens"]


@pytest.mark.parametrize("path", PATHS)
async def test_a_wrong_key_is_401_before_the_body_is_judged(path: str) -> None:
    async with FakeAnthropic(required_credential=Secret("right-key")) as fake, aiohttp.ClientSession() as session:
        async with session.post(fake.url + path, data=b"not json", headers={"x-api-key": "wrong"}) as resp:
            status, body = resp.status, json.loads(await resp.text())
        recorded = [r.path for r in fake.requests]
    assert (status, body["error"]["type"]) == (401, "authentication_error")
    assert recorded == [path]  # refused requests are still recorded


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("payload", [b"not json", b"[1, 2]"])
async def test_a_body_that_is_not_a_json_object_is_400(path: str, payload: bytes) -> None:
    async with (
        FakeAnthropic() as fake,
        aiohttp.ClientSession() as session,
        session.post(fake.url + path, data=payload, headers={"x-api-key": "k"}) as resp,
    ):
        status, body = resp.status, json.loads(await resp.text())
    assert (status, body["error"]["type"]) == (400, "invalid_request_error")
    assert body["error"]["message"] == "request body must be a JSON object"
