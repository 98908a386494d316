"""An offline Anthropic Messages API on loopback that the real Claude Code CLI talks to.

Replies come from a script: a list of turns (text, tool_use, injected error, each with an
optional delay, usage numbers and extra response headers) answered in order, one per
``POST /v1/messages``; when the script runs out the default turn repeats (or, with no
default, a 500 names the problem). Every request is recorded for assertions. The reply's
model is the model requested, so a step's ``AgentResult.model`` is what the CLI asked for.

Strict like a real fake should be: an unknown route answers 404 in the Anthropic error
shape, a body that is not JSON answers 400. It never reaches the network; it binds
127.0.0.1 (or a unix socket) only unless told otherwise.

Usage::

    async with FakeAnthropic(Script.from_yaml("script.yaml")) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "dummy"}

    with FakeAnthropic() as fake:          # sync code: serves from a background thread
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from aiohttp import web

from ironflow.fake_model.script import ErrorTurn, Script, TextTurn, ToolUseTurn, Turn, Usage
from ironflow.secrets import Secret

__all__ = [
    "DEFAULT_MODELS",
    "ErrorTurn",
    "FakeAnthropic",
    "RecordedRequest",
    "Script",
    "TextTurn",
    "ToolUseTurn",
    "Turn",
    "Usage",
]

#: Models ``GET /v1/models`` lists (the CLI resolves aliases itself; any model is answered).
DEFAULT_MODELS: Final = ("claude-sonnet-5-5", "claude-opus-5-1", "claude-haiku-5-0")
#: Sent with thinking blocks; the CLI passes it back on the next request unchanged.
_SIGNATURE: Final = "ZmFrZS1hbnRocm9waWMtc2lnbmF0dXJl"
_CREDENTIAL_HEADERS: Final = frozenset({"x-api-key", "authorization", "proxy-authorization", "cookie"})


# --- recorded requests ------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received. Credential headers are kept (tests assert on them)
    but redacted from the repr."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: Any

    def header(self, name: str) -> str | None:
        """A header by case-insensitive name."""
        lowered = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == lowered), None)

    def __repr__(self) -> str:
        shown = {k: ("***" if k.lower() in _CREDENTIAL_HEADERS else v) for k, v in self.headers.items()}
        return f"RecordedRequest({self.method} {self.path} query={dict(self.query)!r} headers={shown!r})"

    def tool_results(self) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks of the last user message of a Messages request."""
        messages = self.body.get("messages", []) if isinstance(self.body, Mapping) else []
        for message in reversed(messages if isinstance(messages, list) else []):
            if isinstance(message, Mapping) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, list):
                    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
                return []
        return []


# --- the server --------------------------------------------------------------------------


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _blocks(turn: TextTurn | ToolUseTurn, tool_id: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.thinking is not None:
        blocks.append({"type": "thinking", "thinking": turn.thinking, "signature": _SIGNATURE})
    if turn.text is not None:
        blocks.append({"type": "text", "text": turn.text})
    if isinstance(turn, ToolUseTurn):
        blocks.append({"type": "tool_use", "id": tool_id, "name": turn.name, "input": dict(turn.input)})
    return blocks


def _stop_reason(turn: TextTurn | ToolUseTurn) -> str:
    return "tool_use" if isinstance(turn, ToolUseTurn) else turn.stop_reason


def _error_response(status: int, type_: str, message: str) -> web.Response:
    return web.json_response(ErrorTurn(status, type_, message).body(), status=status)


class FakeAnthropic:
    """The offline Messages API. Async: ``async with``; sync: ``with`` (background thread).

    Args:
        script: the replies; default answers "OK" to everything.
        host, port: TCP address (port 0 picks a free one).
        unix_socket: serve on this unix socket path instead of TCP.
        required_credential: when set, a request without this ``x-api-key`` or Bearer token
            gets the API's 401 ``authentication_error``.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        unix_socket: str | Path | None = None,
        required_credential: Secret | str | None = None,
    ) -> None:
        self.script = script or Script()
        self.host = host
        self.port = port
        self.unix_socket = None if unix_socket is None else str(unix_socket)
        self._credential = (
            required_credential
            if required_credential is None or isinstance(required_credential, Secret)
            else Secret(required_credential)
        )
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._next_turn = 0
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._thread_stop: asyncio.Event | None = None

    # -- addresses and records --

    @property
    def url(self) -> str:
        """The base URL to put in ``ANTHROPIC_BASE_URL`` (``http://localhost`` on a unix socket)."""
        if self.unix_socket is not None:
            return "http://localhost"
        if self._runner is None and self._thread is None:
            raise RuntimeError("FakeAnthropic is not started: use `async with` or `with`")
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """Only the ``POST /v1/messages`` requests (the ones that consume script turns)."""
        return [r for r in self.requests if r.method == "POST" and r.path == "/v1/messages"]

    def cli_env(self, home: str | Path, *, api_key: str = "dummy-key", oauth: bool = False) -> dict[str, str]:
        """Environment for running the real ``claude`` against this fake, offline and quickly.

        ``oauth`` sends the dummy credential as a subscription token instead of an API key
        (the CLI then also prints ``rate_limit_event`` lines from rate-limit headers). Its scratch
        files go under ``home`` too (``CLAUDE_CODE_TMPDIR``), not into ``/tmp/claude-<uid>`` where
        nothing removes them.
        """
        scratch = Path(home) / ".claude-tmp"
        scratch.mkdir(mode=0o700, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "CLAUDE_CODE_TMPDIR": str(scratch),
            "ANTHROPIC_BASE_URL": self.url,
            "CLAUDE_CODE_MAX_RETRIES": "0",  # otherwise it retries even a 401 for minutes
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        env["CLAUDE_CODE_OAUTH_TOKEN" if oauth else "ANTHROPIC_API_KEY"] = api_key
        return env

    def reset(self, script: Script | None = None) -> None:
        """Forget recorded requests and restart the script (optionally a new one)."""
        with self._lock:
            self._requests.clear()
            self._next_turn = 0
            if script is not None:
                self.script = script

    def _take_turn(self) -> Turn | None:
        with self._lock:
            index = self._next_turn
            self._next_turn += 1
        if index < len(self.script.turns):
            return self.script.turns[index]
        return self.script.default

    # -- handlers --

    def _authorised(self, request: web.Request) -> bool:
        if self._credential is None:
            return True
        expected = self._credential.reveal()
        bearer = request.headers.get("authorization", "")
        return request.headers.get("x-api-key") == expected or bearer == f"Bearer {expected}"

    async def _record(self, request: web.Request) -> tuple[RecordedRequest, Any]:
        raw = await request.read()
        body: Any = None
        bad = False
        if raw:
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                body, bad = raw.decode(errors="replace"), True
        record = RecordedRequest(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=dict(request.headers),
            body=body,
        )
        with self._lock:
            self._requests.append(record)
        return record, bad

    async def _admit_json(self, request: web.Request) -> tuple[RecordedRequest, web.Response | None]:
        """Record the request, then the answer owed to a bad key (401) or a body that is not a
        JSON object (400), in the real API's order; None when the request may go on."""
        record, bad = await self._record(request)
        if not self._authorised(request):
            return record, _error_response(401, "authentication_error", "invalid x-api-key")
        if bad or not isinstance(record.body, Mapping):
            return record, _error_response(400, "invalid_request_error", "request body must be a JSON object")
        return record, None

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        record, refusal = await self._admit_json(request)
        if refusal is not None:
            return refusal
        model = record.body.get("model")
        if not isinstance(model, str) or not model:
            return _error_response(400, "invalid_request_error", "model: Field required")
        turn = self._take_turn()
        if turn is None:
            return _error_response(500, "api_error", "fake-anthropic script exhausted and no default turn set")
        if turn.delay_s:
            await asyncio.sleep(turn.delay_s)
        msg_id = f"msg_fake_{next(self._ids):06d}"
        if isinstance(turn, ErrorTurn):
            if turn.mid_stream and record.body.get("stream"):
                response = await self._start_stream(request, model, msg_id, self.script.usage, turn.headers)
                await response.write(_sse("error", turn.body()))
                await response.write_eof()
                return response
            return web.json_response(turn.body(), status=turn.status, headers=dict(turn.headers))
        usage = turn.usage or self.script.usage
        tool_id = (turn.id if isinstance(turn, ToolUseTurn) else None) or f"toolu_fake_{uuid.uuid4().hex[:20]}"
        if record.body.get("stream"):
            return await self._stream(request, turn, model, msg_id, tool_id, usage)
        return web.json_response(
            {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": _blocks(turn, tool_id),
                "stop_reason": _stop_reason(turn),
                "stop_sequence": None,
                "usage": usage.to_json(),
            },
            headers=dict(turn.headers),
        )

    async def _start_stream(
        self, request: web.Request, model: str, msg_id: str, usage: Usage, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", "cache-control": "no-cache", **headers}
        )
        await response.prepare(request)
        start_usage = {**usage.to_json(), "output_tokens": 1}
        await response.write(
            _sse(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": start_usage,
                    },
                },
            )
        )
        return response

    async def _stream(
        self, request: web.Request, turn: TextTurn | ToolUseTurn, model: str, msg_id: str, tool_id: str, usage: Usage
    ) -> web.StreamResponse:
        response = await self._start_stream(request, model, msg_id, usage, turn.headers)
        for index, block in enumerate(_blocks(turn, tool_id)):
            start: dict[str, Any]
            deltas: list[dict[str, Any]]
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": block["text"]}]
            elif block["type"] == "thinking":
                start = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": block["thinking"]},
                    {"type": "signature_delta", "signature": block["signature"]},
                ]
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
            await response.write(
                _sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
            )
            for delta in deltas:
                await response.write(
                    _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
                )
            await response.write(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        await response.write(
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": _stop_reason(turn), "stop_sequence": None},
                    "usage": usage.to_json(),
                },
            )
        )
        await response.write(_sse("message_stop", {"type": "message_stop"}))
        await response.write_eof()
        return response

    async def _count_tokens(self, request: web.Request) -> web.Response:
        record, refusal = await self._admit_json(request)
        if refusal is not None:
            return refusal
        # Rough like the real thing: about four characters a token.
        return web.json_response({"input_tokens": max(1, len(json.dumps(record.body.get("messages", []))) // 4)})

    async def _models(self, request: web.Request) -> web.Response:
        await self._record(request)
        if not self._authorised(request):
            return _error_response(401, "authentication_error", "invalid x-api-key")
        data = [
            {"type": "model", "id": m, "display_name": m, "created_at": "2026-01-01T00:00:00Z"} for m in DEFAULT_MODELS
        ]
        page = {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
        return web.json_response(page)

    async def _unknown(self, request: web.Request) -> web.Response:
        await self._record(request)
        return _error_response(404, "not_found_error", f"fake-anthropic has no route {request.method} {request.path}")

    def app(self) -> web.Application:
        """The aiohttp application (usable with aiohttp's test client too)."""
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    # -- async lifecycle --

    async def start(self) -> FakeAnthropic:
        """Bind and serve; ``url`` is valid afterwards."""
        if self._runner is not None:
            raise RuntimeError("FakeAnthropic already started")
        # A client that goes (a step cut at its timeout) cancels its request's handler, and close
        # does not wait for a scripted delay to end: a test double has nothing to drain.
        runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, handler_cancellation=True, shutdown_timeout=0.5
        )
        await runner.setup()
        site: web.BaseSite
        if self.unix_socket is not None:
            site = web.UnixSite(runner, self.unix_socket)
        else:
            site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        if self.unix_socket is None:
            self.port = int(runner.addresses[0][1])  # the bound port, when 0 was asked for
        self._runner = runner
        return self

    async def close(self) -> None:
        """Stop serving and release the socket (idempotent)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        if self.unix_socket is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_socket)

    async def serve_forever(self) -> None:
        """Serve until cancelled (the dev CLI's loop)."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.close()

    async def __aenter__(self) -> FakeAnthropic:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- sync lifecycle (a background thread with its own loop) --

    def start_in_thread(self, timeout_s: float = 10.0) -> FakeAnthropic:
        """Serve from a daemon thread so sync code and subprocesses can use the fake."""
        if self._thread is not None:
            raise RuntimeError("FakeAnthropic already started in a thread")
        ready = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._thread_loop = asyncio.get_running_loop()
            self._thread_stop = asyncio.Event()
            try:
                await self.start()
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                return
            ready.set()
            try:
                await self._thread_stop.wait()
            finally:
                await self.close()

        self._thread = threading.Thread(target=asyncio.run, args=(main(),), name="fake-anthropic", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise RuntimeError(f"FakeAnthropic did not start within {timeout_s:g}s")
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop_thread(self, timeout_s: float = 10.0) -> None:
        """Stop the background server started by :meth:`start_in_thread` (idempotent)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stop = self._thread_loop, self._thread_stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop already gone
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout_s)

    def __enter__(self) -> FakeAnthropic:
        return self.start_in_thread()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_thread()
