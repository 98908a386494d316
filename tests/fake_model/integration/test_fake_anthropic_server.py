"""FakeAnthropic over real sockets: SSE and JSON replies, recording, errors, lifecycles."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ironflow.fake_model import FakeAnthropic, Script
from ironflow.fake_model.script import ErrorTurn, TextTurn, ToolUseTurn, Usage
from ironflow.fake_model.server import DEFAULT_MODELS
from ironflow.secrets import Secret
from ironflow.testing import assert_no_leaks

BODY: dict[str, Any] = {"model": "claude-test-1", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


def sse_events(raw: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


async def post(fake: FakeAnthropic, body: Any, path: str = "/v1/messages?beta=true") -> tuple[int, str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(fake.url + path, json=body, headers={"x-api-key": "k"}) as resp,
    ):
        return resp.status, resp.headers.get("content-type", ""), await resp.text()


async def test_streaming_reply_has_the_event_sequence_and_the_requested_model() -> None:
    async with FakeAnthropic(Script.of(TextTurn("Hello!", usage=Usage(7, 3)))) as fake:
        status, ctype, raw = await post(fake, {**BODY, "stream": True})
    assert status == 200
    assert ctype.startswith("text/event-stream")
    events = sse_events(raw)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["model"] == "claude-test-1"
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "Hello!"}
    assert events[4][1]["delta"]["stop_reason"] == "end_turn"
    assert events[4][1]["usage"]["output_tokens"] == 3
    assert events[4][1]["usage"]["input_tokens"] == 7


async def test_streaming_tool_use_sends_input_json_delta_and_tool_use_stop() -> None:
    turn = ToolUseTurn("Bash", {"command": "ls -la"}, text="Looking.", id="toolu_1")
    async with FakeAnthropic(Script.of(turn)) as fake:
        _, _, raw = await post(fake, {**BODY, "stream": True})
    events = sse_events(raw)
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert starts == [
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
    ]
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert json.loads(deltas[1]["partial_json"]) == {"command": "ls -la"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_non_streaming_reply_is_a_plain_message() -> None:
    async with FakeAnthropic(Script.of(ToolUseTurn("Read", {"file_path": "/x"}, id="toolu_2"))) as fake:
        status, ctype, raw = await post(fake, BODY)
    assert status == 200
    assert ctype.startswith("application/json")
    message = json.loads(raw)
    assert message["model"] == "claude-test-1"
    assert message["content"] == [{"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"file_path": "/x"}}]
    assert message["stop_reason"] == "tool_use"


async def test_turns_are_answered_in_order_then_the_default_repeats() -> None:
    async with FakeAnthropic(Script.of("one", "two", default="again")) as fake:
        texts = [json.loads((await post(fake, BODY))[2])["content"][0]["text"] for _ in range(4)]
    assert texts == ["one", "two", "again", "again"]


async def test_exhausted_script_without_default_answers_500_naming_the_problem() -> None:
    async with FakeAnthropic(Script.of("only", default=None)) as fake:
        await post(fake, BODY)
        status, _, raw = await post(fake, BODY)
    assert status == 500
    assert "script exhausted" in json.loads(raw)["error"]["message"]


async def test_error_turn_answers_anthropic_shaped_error_with_headers() -> None:
    turn = ErrorTurn(529, "overloaded_error", "Overloaded", headers={"retry-after": "7"})
    async with (
        FakeAnthropic(Script.of(turn)) as fake,
        aiohttp.ClientSession() as session,
        session.post(fake.url + "/v1/messages", json=BODY) as resp,
    ):
        body = await resp.json()
        assert resp.status == 529
        assert resp.headers["retry-after"] == "7"
    assert body["type"] == "error"
    assert body["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert body["request_id"].startswith("req_")


async def test_delay_holds_the_reply() -> None:
    async with FakeAnthropic(Script.of(TextTurn("slow", delay_s=0.3))) as fake:
        started = time.monotonic()
        await post(fake, BODY)
    assert time.monotonic() - started >= 0.3


async def test_every_request_is_recorded_with_query_headers_and_body() -> None:
    async with FakeAnthropic() as fake:
        await post(fake, BODY)
        await post(fake, {"messages": []}, "/v1/messages/count_tokens?beta=true")
    first, second = fake.requests
    assert (first.method, first.path, first.query) == ("POST", "/v1/messages", {"beta": "true"})
    assert first.body == BODY
    assert first.header("X-API-KEY") == "k"
    assert second.path == "/v1/messages/count_tokens"
    assert len(fake.message_requests) == 1
    assert "'x-api-key': '***'" in repr(first).lower()


async def test_count_tokens_and_models_do_not_consume_turns() -> None:
    async with FakeAnthropic(Script.of("first")) as fake:
        status, _, raw = await post(fake, BODY, "/v1/messages/count_tokens")
        assert status == 200
        assert json.loads(raw)["input_tokens"] > 0
        async with aiohttp.ClientSession() as session, session.get(fake.url + "/v1/models") as resp:
            models = await resp.json()
        assert [m["id"] for m in models["data"]] == list(DEFAULT_MODELS)
        assert json.loads((await post(fake, BODY))[2])["content"][0]["text"] == "first"


@pytest.mark.parametrize(
    ("path", "body", "status", "kind"),
    [
        ("/v1/complete", BODY, 404, "not_found_error"),
        ("/v1/messages", {"messages": []}, 400, "invalid_request_error"),
        ("/v1/messages", [1, 2], 400, "invalid_request_error"),
    ],
)
async def test_strict_answers_for_unknown_routes_and_bad_bodies(path: str, body: Any, status: int, kind: str) -> None:
    async with FakeAnthropic() as fake:
        got, _, raw = await post(fake, body, path)
    assert got == status
    assert json.loads(raw)["error"]["type"] == kind


async def test_required_credential_accepts_key_or_bearer_and_refuses_others() -> None:
    async with FakeAnthropic(required_credential=Secret("right-key")) as fake, aiohttp.ClientSession() as session:
        statuses = []
        for headers in ({"x-api-key": "right-key"}, {"authorization": "Bearer right-key"}, {"x-api-key": "wrong"}, {}):
            async with session.post(fake.url + "/v1/messages", json=BODY, headers=headers) as resp:
                statuses.append(resp.status)
                body = await resp.text()
    assert statuses == [200, 200, 401, 401]
    assert_no_leaks(["right-key"], body)


async def test_reset_restarts_the_script_and_forgets_requests() -> None:
    async with FakeAnthropic(Script.of("one")) as fake:
        await post(fake, BODY)
        fake.reset(Script.of("new"))
        assert fake.requests == []
        assert json.loads((await post(fake, BODY))[2])["content"][0]["text"] == "new"


async def test_unix_socket_server_answers_and_removes_its_socket(tmp_path: Path) -> None:
    sock = tmp_path / "anthropic.sock"
    async with FakeAnthropic(Script.of("via socket"), unix_socket=sock) as fake:
        assert fake.url == "http://localhost"
        connector = aiohttp.UnixConnector(path=str(sock))
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(fake.url + "/v1/messages", json=BODY) as resp,
        ):
            message = await resp.json()
    assert message["content"][0]["text"] == "via socket"
    assert not sock.exists()


def test_sync_use_serves_from_a_background_thread() -> None:
    with FakeAnthropic(Script.of("from a thread")) as fake:
        request = urllib.request.Request(  # noqa: S310 - loopback URL of the fake
            fake.url + "/v1/messages", data=json.dumps(BODY).encode(), headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as resp:  # noqa: S310
            message = json.loads(resp.read())
        url = fake.url
    assert message["content"][0]["text"] == "from a thread"
    assert len(fake.requests) == 1
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/v1/models", timeout=2)  # noqa: S310 - stopped: must refuse


async def test_url_before_start_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = FakeAnthropic().url


async def test_second_server_on_a_busy_port_fails_and_the_first_keeps_serving() -> None:
    async with FakeAnthropic() as first:
        with pytest.raises(OSError, match="in use"):
            await FakeAnthropic(port=first.port).start()
        assert (await post(first, BODY))[0] == 200


async def test_thinking_turn_streams_thinking_and_signature_deltas() -> None:
    async with FakeAnthropic(Script.of(TextTurn("answer", thinking="pondering"))) as fake:
        _, _, raw = await post(fake, {**BODY, "stream": True})
        _, _, plain = await post(fake, BODY)
    deltas = [data["delta"]["type"] for name, data in sse_events(raw) if name == "content_block_delta"]
    assert deltas == ["thinking_delta", "signature_delta", "text_delta"]
    assert [b["type"] for b in json.loads(plain)["content"]] == ["text"]  # the default turn has no thinking


async def test_mid_stream_error_sends_message_start_then_an_error_event() -> None:
    turn = ErrorTurn(529, "overloaded_error", "Overloaded", mid_stream=True)
    async with FakeAnthropic(Script.of(turn, turn)) as fake:
        status, _, raw = await post(fake, {**BODY, "stream": True})
        plain_status, _, _ = await post(fake, BODY)
    assert status == 200
    events = sse_events(raw)
    assert [name for name, _ in events] == ["message_start", "error"]
    assert events[1][1]["error"]["type"] == "overloaded_error"
    assert plain_status == 529


def test_thread_start_on_a_busy_port_raises_and_leaves_no_thread() -> None:
    with FakeAnthropic() as first:
        second = FakeAnthropic(port=first.port)
        with pytest.raises(OSError, match="in use"):
            second.start_in_thread()
        second.stop_thread()  # nothing to stop: idempotent
        with pytest.raises(RuntimeError, match="not started"):
            _ = second.url
