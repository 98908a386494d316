"""A step with an egress policy and no Claude credential gets an egress-only token: it opens
``CONNECT`` tunnels the policy allows and nothing on the relays (rows 5b and S1b: 403).

The step's real in-process proxy (:func:`step_proxy.step_session`) on its two unix sockets, a
loopback TLS origin, and a client speaking HTTP/1.1 on the sockets as the sandbox's forwarder does.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.tls_origin import hello_origin, make_tls

from ironflow import egress
from ironflow.local.sandbox import environment, step_proxy
from ironflow.secrets import Secret


@pytest.fixture
async def origin(tmp_path: Path) -> AsyncIterator[tuple[int, ssl.SSLContext]]:
    """A TLS server on 127.0.0.1 answering ``hello``; its port and a client context trusting its CA."""
    tls = make_tls(tmp_path)
    async with hello_origin("127.0.0.1", tls.server) as port:
        yield port, tls.client()


async def _ask(socket_path: str, head: str) -> bytes:
    """One request on a proxy socket; all it answers until it closes."""
    reader, writer = await asyncio.open_unix_connection(socket_path)
    try:
        writer.write(head.encode())
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


async def test_an_egress_only_token_tunnels_and_is_refused_on_the_relays(
    tmp_path: Path, origin: tuple[int, ssl.SSLContext]
) -> None:
    port, client_tls = origin
    policy = egress.EgressPolicy(allow=(egress.parse_allow_host(f"127.0.0.1:{port}"),))
    proxy_socket, egress_socket = str(tmp_path / "proxy.sock"), str(tmp_path / "egress.sock")
    async with step_proxy.step_session(
        None, (), socket_path=proxy_socket, run_id=None, step="command", expires_in=60,
        egress=policy, egress_socket=egress_socket,
    ) as issued:  # fmt: skip
        assert issued.claude is None
        assert issued.egress is not None
        token = issued.egress.reveal()
        env = issued.env()
        assert env["HTTPS_PROXY"] == f"http://ironflow:{token}@127.0.0.1:18081"
        assert "ANTHROPIC_AUTH_TOKEN" not in env

        body = '{"model": "m", "max_tokens": 1, "messages": []}'
        messages = await _ask(
            proxy_socket,
            f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}",
        )
        head, _, answer = messages.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 403"), head
        assert json.loads(answer)["error"]["message"] == "this token only reaches the egress proxy"
        relayed = await _ask(
            proxy_socket,
            f"GET /r/github.com/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
        )
        assert relayed.startswith(b"HTTP/1.1 403"), relayed[:200]
        assert b"this token only reaches the egress proxy" in relayed

        basic = base64.b64encode(f"ironflow:{token}".encode()).decode()
        reader, writer = await asyncio.open_unix_connection(egress_socket)
        try:
            writer.write(
                f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Proxy-Authorization: Basic {basic}\r\n\r\n".encode()
            )
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            await writer.start_tls(client_tls, server_hostname="127.0.0.1")
            writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert (await asyncio.wait_for(reader.read(), 20)).endswith(b"hello")
        finally:
            writer.close()
        refused = await _ask(
            egress_socket,
            f"CONNECT 127.0.0.1:{port + 1} HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic {basic}\r\n\r\n",
        )
        assert refused.startswith(b"HTTP/1.1 403"), refused[:200]


async def test_without_a_policy_no_egress_token_is_issued(tmp_path: Path) -> None:
    async with step_proxy.step_session(
        None, (), socket_path=str(tmp_path / "p.sock"), run_id=None, step="command", expires_in=60,
        egress=egress.EgressPolicy(), egress_socket=str(tmp_path / "e.sock"),
    ) as issued:  # fmt: skip
        assert issued.egress is None
        assert issued.env() == {}


async def test_with_a_claude_credential_egress_still_gets_its_own_token(
    tmp_path: Path, origin: tuple[int, ssl.SSLContext]
) -> None:
    """The proxy URL every tool sees is never the Claude token, and the Claude token opens no tunnel."""
    port, _ = origin
    policy = egress.EgressPolicy(allow=(egress.parse_allow_host(f"127.0.0.1:{port}"),))
    credential = environment.ProxyCredential(Secret("sk-ant-test-" + "c" * 20), "api_key", "http://127.0.0.1:9")
    egress_socket = str(tmp_path / "e.sock")
    async with step_proxy.step_session(
        credential, (), socket_path=str(tmp_path / "p.sock"), run_id=None, step="agent", expires_in=60,
        egress=policy, egress_socket=egress_socket,
    ) as issued:  # fmt: skip
        assert issued.claude is not None
        assert issued.egress is not None
        assert issued.egress.reveal() != issued.claude.reveal()
        assert issued.claude.reveal() not in issued.env()["HTTPS_PROXY"]
        basic = base64.b64encode(f"ironflow:{issued.claude.reveal()}".encode()).decode()
        refused = await _ask(
            egress_socket,
            f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic {basic}\r\n\r\n",
        )
        assert refused.startswith(b"HTTP/1.1 403"), refused[:200]
