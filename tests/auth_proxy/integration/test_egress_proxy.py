"""The egress proxy on real sockets, with real clients (curl, Python's TLS) and loopback origins.

Each origin counts the connections it accepted, so a refusal is shown to have reached nothing.
The SSRF cases run with ``allow *``: the fixed deny set must hold on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.fakes.git_server import GIT_ENV, GitServer, git, seed_forge

from ironflow import egress
from ironflow.auth_proxy import AdminClient, AuthProxyConfig, Credential, KeyRing, run_auth_proxy, tokens
from ironflow.auth_proxy.app import RunningProxy
from ironflow.auth_proxy.egress_server import Resolver
from ironflow.auth_proxy.postgres import PostgresRegistry
from ironflow.errors import AuthProxyError
from ironflow.secrets import Secret
from ironflow.testing import _kubeenv_pki as pki
from ironflow.testing.ports import free_port
from ironflow.testing.postgres_server import fresh_database

ADMIN = "admin-key-" + "e" * 40
CREDENTIAL = Credential("api_key", Secret("sk-ant-api03-" + "k" * 20))
HELLO = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"


@dataclass
class Origin:
    """A loopback server answering ``hello`` to each request head; ``heads`` are what it read."""

    host: str
    port: int = 0
    connections: int = 0
    heads: list[bytes] = field(default_factory=list)
    reply: bytes = HELLO

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(self.reply)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def _origin(
    host: str = "127.0.0.1", *, tls: ssl.SSLContext | None = None, port: int = 0
) -> AsyncIterator[Origin]:
    origin = Origin(host)
    server = await asyncio.start_server(origin.serve, host, port, ssl=tls)
    origin.port = server.sockets[0].getsockname()[1]
    try:
        yield origin
    finally:
        server.close()


@dataclass(frozen=True)
class Tls:
    ca: Path
    server: ssl.SSLContext

    def client(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    """A test CA and a server certificate for localhost and 127.0.0.1."""
    root = tmp_path_factory.mktemp("egress-pki")
    keys = pki.new_pki()
    (root / "ca.pem").write_bytes(keys.ca.cert_pem)
    (root / "cert.pem").write_bytes(keys.admin.cert_pem)
    (root / "key.pem").write_bytes(keys.admin.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(root / "cert.pem", root / "key.pem")
    return Tls(root / "ca.pem", context)


@contextlib.asynccontextmanager
async def _proxy(
    resolver: Resolver | None = None, *, max_tunnels: int = 64, idle_s: float = 300.0, max_bytes: int | None = None
) -> AsyncIterator[tuple[RunningProxy, AdminClient]]:
    config = AuthProxyConfig(
        admin_key=Secret(ADMIN),
        upstream="http://127.0.0.1:9",
        egress_host="127.0.0.1",
        egress_port=0,
        egress_max_tunnels=max_tunnels,
        egress_idle_timeout_s=idle_s,
        egress_max_bytes=max_bytes,
    )
    async with (
        run_auth_proxy(config, egress_resolver=resolver) as running,
        AdminClient(running.url, ADMIN) as admin,
    ):
        yield running, admin


async def _token(admin: AdminClient, *allow: str, egress_policy: egress.EgressPolicy | None = None) -> str:
    policy = egress_policy or egress.EgressPolicy(allow=tuple(egress.parse_allow_host(a) for a in allow))
    issued = await admin.issue("run-1", "build", int(time.time()) + 600, credential=CREDENTIAL, egress=policy)
    return issued.token.reveal()


async def _curl(egress_url: str | None, token: str, url: str, tls: Tls | None = None) -> tuple[int, str, str]:
    """curl through the egress proxy as a sandbox would (``http://user:TOKEN@proxy``): exit code, body, stderr."""
    assert egress_url is not None
    proxy_url = egress_url.replace("http://", f"http://ironflow:{token}@")
    args = ["curl", "-sS", "--max-time", "20", "-x", proxy_url, url]
    if tls is not None:
        args += ["--cacert", str(tls.ca)]
    env = {"PATH": "/usr/bin:/bin", "NO_PROXY": ""}
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _raw(proxy: RunningProxy, head: str) -> bytes:
    """Send one head to the egress proxy; everything it answers until it closes."""
    assert proxy.egress is not None
    host, _, port = proxy.egress.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head.encode())
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def _auth(token: str) -> str:
    return f"Proxy-Authorization: Bearer {token}\r\n"


# --- allowed and refused by the policy ---------------------------------------------------------


async def test_curl_fetches_https_through_connect_when_the_policy_names_host_and_port(tls: Tls) -> None:
    async with _origin(tls=tls.server) as origin, _proxy() as (proxy, admin):
        token = await _token(admin, f"127.0.0.1:{origin.port}")
        code, body, err = await _curl(proxy.egress, token, f"https://127.0.0.1:{origin.port}/simple/", tls)
        assert (code, body) == (0, "hello"), err
        assert origin.heads[0].startswith(b"GET /simple/ HTTP/1.1\r\n")
        assert b"ifap_" not in origin.heads[0]  # the token went to the proxy only


async def test_curl_is_refused_with_the_rule_when_the_policy_names_another_port(tls: Tls) -> None:
    async with _origin(tls=tls.server) as origin, _proxy() as (proxy, admin):
        token = await _token(admin, f"127.0.0.1:{origin.port + 1}")
        code, _, err = await _curl(proxy.egress, token, f"https://127.0.0.1:{origin.port}/", tls)
        assert code != 0
        assert "403" in err
        answer = await _raw(proxy, f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n{_auth(token)}\r\n")
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert f"ironflow egress: denied 127.0.0.1:{origin.port}: ".encode() in answer
    assert origin.connections == 0


async def test_a_grant_without_an_egress_policy_reaches_nothing(tls: Tls) -> None:
    async with _origin(tls=tls.server) as origin, _proxy() as (proxy, admin):
        issued = await admin.issue("run-1", "build", int(time.time()) + 600, credential=CREDENTIAL)
        answer = await _raw(proxy, f"CONNECT example.com:443 HTTP/1.1\r\n{_auth(issued.token.reveal())}\r\n")
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert origin.connections == 0


async def test_plain_http_is_forwarded_in_origin_form_without_the_proxy_credential(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ironflow.auth_proxy")
    async with _origin() as origin, _proxy() as (proxy, admin):
        token = await _token(admin, f"127.0.0.1:{origin.port}")
        code, body, err = await _curl(proxy.egress, token, f"http://127.0.0.1:{origin.port}/pkg/a.tgz?sig=querysecret")
        assert (code, body) == (0, "hello"), err
    head = origin.heads[0].decode()
    assert head.startswith("GET /pkg/a.tgz?sig=querysecret HTTP/1.1\r\n")
    assert "proxy-authorization" not in head.lower()
    assert "\r\nConnection: close\r\n" in head
    lines = [r for r in caplog.records if r.getMessage() == "egress allowed"]
    assert len(lines) == 1
    fields = lines[0].__dict__["fields"]
    assert (fields["host"], fields["port"], fields["method"], fields["path"]) == (
        "127.0.0.1",
        origin.port,
        "GET",
        "/pkg/a.tgz",
    )
    assert fields["received"] == len(HELLO)
    assert "querysecret" not in caplog.text
    assert token not in caplog.text


async def test_a_redirect_is_handed_back_not_followed() -> None:
    async with _origin() as origin, _proxy() as (proxy, admin):
        token = await _token(admin, f"127.0.0.1:{origin.port}")
        redirect = f"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{origin.port}/b\r\nContent-Length: 0\r\n\r\n"
        origin.reply = redirect.encode()
        answer = await _raw(proxy, f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\n{_auth(token)}\r\n")
    assert answer == redirect.encode()
    assert len(origin.heads) == 1


# --- the SSRF guard ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        "CONNECT 169.254.169.254:443 HTTP/1.1",
        "CONNECT 127.0.0.1:{port} HTTP/1.1",
        "GET http://2130706433:{port}/ HTTP/1.1",
        "GET http://0x7f.1:{port}/ HTTP/1.1",
        "GET http://0177.0.0.1:{port}/ HTTP/1.1",
        "GET http://[::ffff:127.0.0.1]:{port}/ HTTP/1.1",
        "CONNECT [::1]:{port} HTTP/1.1",
        "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1",
    ],
)
async def test_the_fixed_deny_set_holds_even_with_allow_star(head: str) -> None:
    async with _origin() as origin, _proxy() as (proxy, admin):
        token = await _token(admin, "*:*")
        answer = await _raw(proxy, head.format(port=origin.port) + f"\r\n{_auth(token)}\r\n")
    assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert origin.connections == 0


async def test_a_name_is_checked_by_every_address_it_resolves_to() -> None:
    """``allow *`` and a name answering loopback: refused after resolution, nothing connected."""
    async with _origin() as origin, _proxy(Rebinding(["127.0.0.1"])) as (proxy, admin):
        token = await _token(admin, "*:*")
        answer = await _raw(proxy, f"GET http://internal.example:{origin.port}/ HTTP/1.1\r\n{_auth(token)}\r\n")
    assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert b"resolved to 127.0.0.1" in answer
    assert origin.connections == 0


class Rebinding:
    """A resolver whose answer changes between two lookups, as a hostile DNS server's would."""

    def __init__(self, *answers: Sequence[str]) -> None:
        self.answers = [[egress.parse_ip_literal(a) for a in answer] for answer in answers]
        self.lookups: list[str] = []

    async def resolve(self, host: str, port: int) -> Sequence[egress.IPAddress]:
        self.lookups.append(host)
        found = self.answers[min(len(self.lookups), len(self.answers)) - 1]
        return [a for a in found if a is not None]


@contextlib.asynccontextmanager
async def _twin_origins() -> AsyncIterator[tuple[Origin, Origin]]:
    """Two origins on one port: 127.0.0.2 (the address a rule opens) and 127.0.0.1 (the target)."""
    for _ in range(20):
        async with _origin("127.0.0.2") as allowed:
            try:
                async with _origin("127.0.0.1", port=allowed.port) as target:
                    yield allowed, target
                    return
            except OSError:
                continue
    raise AssertionError("no port free on both 127.0.0.1 and 127.0.0.2")


async def test_dns_rebinding_connects_to_the_address_that_was_checked() -> None:
    """The name answers 127.0.0.2 (opened for it) on the first lookup and 127.0.0.1 on any later
    one: the proxy looks up once and connects to what it checked."""
    async with _twin_origins() as (allowed, target):
        resolver = Rebinding(["127.0.0.2"], ["127.0.0.1"])
        async with _proxy(resolver) as (proxy, admin):
            token = await _token(admin, f"rebind.example:{allowed.port}@127.0.0.2/32")
            head = f"GET http://rebind.example:{allowed.port}/ HTTP/1.1\r\n{_auth(token)}\r\n"
            first = await _raw(proxy, head)
            second = await _raw(proxy, head)
    assert first.endswith(b"hello")
    assert (allowed.connections, target.connections) == (1, 0)
    assert resolver.lookups == ["rebind.example", "rebind.example"]  # one lookup per request
    assert second.startswith(b"HTTP/1.1 403 ")  # the rebound answer is checked too


async def test_a_name_answering_a_public_and_a_private_address_is_refused() -> None:
    async with _twin_origins() as (allowed, target):
        resolver = Rebinding(["127.0.0.2", "127.0.0.1"])
        async with _proxy(resolver) as (proxy, admin):
            token = await _token(admin, f"rebind.example:{allowed.port}@127.0.0.2/32")
            answer = await _raw(proxy, f"CONNECT rebind.example:{allowed.port} HTTP/1.1\r\n{_auth(token)}\r\n")
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert (allowed.connections, target.connections) == (0, 0)


# --- the ClientHello must name the CONNECT host -----------------------------------------------


async def _tls_through(proxy: RunningProxy, token: str, target: str, tls: Tls, server_name: str | None) -> bytes:
    """CONNECT ``target``, then TLS with ``server_name`` (SNI) and one GET; the answer."""
    assert proxy.egress is not None
    host, _, port = proxy.egress.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"CONNECT {target} HTTP/1.1\r\n{_auth(token)}\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        context = tls.client()
        context.check_hostname = False  # the certificate names localhost; the SNI is what is tested
        await writer.start_tls(context, server_hostname=server_name)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_a_connect_whose_sni_names_another_host_is_closed(tls: Tls) -> None:
    async with _origin(tls=tls.server) as origin, _proxy() as (proxy, admin):
        token = await _token(admin, f"localhost:{origin.port}@127.0.0.0/8", f"127.0.0.1:{origin.port}")
        assert (await _tls_through(proxy, token, f"localhost:{origin.port}", tls, "localhost")).endswith(b"hello")
        for target, name in [(f"localhost:{origin.port}", "metadata.internal"), (f"127.0.0.1:{origin.port}", "x.io")]:
            with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
                await _tls_through(proxy, token, target, tls, name)
        assert (await _tls_through(proxy, token, f"127.0.0.1:{origin.port}", tls, None)).endswith(b"hello")
    assert len(origin.heads) == 2  # only the two tunnels whose ClientHello matched sent a request


async def test_a_connect_tunnel_carrying_no_tls_is_closed(tls: Tls) -> None:
    async with _origin() as origin, _proxy() as (proxy, admin):
        token = await _token(admin, f"127.0.0.1:{origin.port}")
        answer = await _raw(
            proxy, f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n{_auth(token)}\r\nGET / HTTP/1.1\r\n\r\n"
        )
    assert answer == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert origin.heads == []


# --- tokens and limits -------------------------------------------------------------------------


async def test_a_revoked_unknown_or_missing_token_gets_the_same_407(tls: Tls) -> None:
    async with _origin(tls=tls.server) as origin, _proxy() as (proxy, admin):
        issued = await admin.issue(
            "run-1",
            "build",
            int(time.time()) + 600,
            credential=CREDENTIAL,
            egress=egress.EgressPolicy(allow=(egress.parse_allow_host(f"127.0.0.1:{origin.port}"),)),
        )
        await admin.revoke(issued.id)
        head = f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n"
        answers = [
            await _raw(proxy, head + _auth(issued.token.reveal()) + "\r\n"),
            await _raw(proxy, head + _auth("ifap_" + "0" * 64) + "\r\n"),
            await _raw(proxy, head + "\r\n"),
        ]
        code, _, err = await _curl(proxy.egress, issued.token.reveal(), f"https://127.0.0.1:{origin.port}/", tls)
    assert answers[0].startswith(b"HTTP/1.1 407 ")
    assert b'\r\nProxy-Authenticate: Basic realm="ironflow egress"\r\n' in answers[0]
    assert answers[0] == answers[1] == answers[2]
    assert code != 0
    assert "407" in err
    assert origin.connections == 0


async def test_a_token_past_its_tunnel_limit_gets_429_until_one_closes(tls: Tls) -> None:
    async with _origin(tls=tls.server) as origin, _proxy(max_tunnels=1) as (proxy, admin):
        token = await _token(admin, f"127.0.0.1:{origin.port}")
        assert proxy.egress is not None
        host, _, port = proxy.egress.removeprefix("http://").rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n{_auth(token)}\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        second = await _raw(proxy, f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n{_auth(token)}\r\n")
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(0.1)
        code, body, err = await _curl(proxy.egress, token, f"https://127.0.0.1:{origin.port}/", tls)
    assert second.startswith(b"HTTP/1.1 429 ")
    assert (code, body) == (0, "hello"), err


async def test_a_token_past_its_byte_budget_is_cut_then_refused() -> None:
    async with _origin() as origin, _proxy(max_bytes=40) as (proxy, admin):
        token = await _token(admin, f"127.0.0.1:{origin.port}")
        head = f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\n{_auth(token)}\r\n"
        first = await _raw(proxy, head)
        second = await _raw(proxy, head)
    assert first == b""  # the answer (68 bytes) would pass the budget: cut before any of it is relayed
    assert second.startswith(b"HTTP/1.1 429 ")
    assert b"bytes are spent" in second


async def test_a_silent_tunnel_is_closed_after_the_idle_timeout(tls: Tls) -> None:
    async with _origin(tls=tls.server) as origin, _proxy(idle_s=0.3) as (proxy, admin):
        token = await _token(admin, f"127.0.0.1:{origin.port}")
        assert proxy.egress is not None
        host, _, port = proxy.egress.removeprefix("http://").rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n{_auth(token)}\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        await writer.start_tls(tls.client(), server_hostname=None)
        started = time.monotonic()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    assert time.monotonic() - started < 5


async def test_a_malformed_or_oversized_head_is_refused() -> None:
    async with _proxy() as (proxy, _):
        bad = await _raw(proxy, "CONNECT nothing HTTP/1.1\r\n\r\n")
        https = await _raw(proxy, "GET https://example.com/ HTTP/1.1\r\n\r\n")
        huge = await _raw(proxy, "GET http://example.com/ HTTP/1.1\r\nX-A: " + "a" * 70_000 + "\r\n\r\n")
    assert bad.startswith(b"HTTP/1.1 400 ")
    assert https.startswith(b"HTTP/1.1 400 ")
    assert b"use CONNECT" in https
    assert huge.startswith(b"HTTP/1.1 431 ")


async def test_a_rule_scoped_by_method_and_path_opens_only_those_plain_requests() -> None:
    async with _origin() as origin, _proxy() as (proxy, admin):
        rule = {"host": "127.0.0.1", "ports": [origin.port], "methods": ["GET"], "path_prefix": "/simple/"}
        token = await _token(admin, egress_policy=egress.EgressPolicy.from_json({"allow": [rule]}))
        where = f"http://127.0.0.1:{origin.port}"
        answers = {
            head: await _raw(proxy, f"{head} HTTP/1.1\r\n{_auth(token)}\r\n")
            for head in (
                f"GET {where}/simple/pip/",
                f"GET {where}/other",
                f"POST {where}/simple/pip/",
                f"CONNECT 127.0.0.1:{origin.port}",
            )
        }
    statuses = {head: answer.split(b" ")[1] for head, answer in answers.items()}
    assert list(statuses.values()) == [b"200", b"403", b"403", b"403"], statuses
    assert len(origin.heads) == 1


async def test_a_deny_rule_scoped_by_method_closes_tunnels_to_its_host() -> None:
    """A tunnel could carry the denied method: it fails closed."""
    async with _origin() as origin, _proxy(Rebinding(["127.0.0.1"])) as (proxy, admin):
        policy = {
            "allow": [{"host": "svc.example", "ports": [origin.port], "addresses": ["127.0.0.1/32"]}],
            "deny": [{"host": "svc.example", "ports": [origin.port], "methods": ["POST"]}],
        }
        token = await _token(admin, egress_policy=egress.EgressPolicy.from_json(policy))
        get = await _raw(proxy, f"GET http://svc.example:{origin.port}/ HTTP/1.1\r\n{_auth(token)}\r\n")
        post = await _raw(proxy, f"POST http://svc.example:{origin.port}/ HTTP/1.1\r\n{_auth(token)}\r\n")
        tunnel = await _raw(proxy, f"CONNECT svc.example:{origin.port} HTTP/1.1\r\n{_auth(token)}\r\n")
    assert get.startswith(b"HTTP/1.1 200 OK")
    assert post.startswith(b"HTTP/1.1 403 ")
    assert tunnel.startswith(b"HTTP/1.1 403 ")


@pytest.mark.postgres
async def test_a_grants_egress_policy_is_kept_by_postgresql(postgres_dsn: str) -> None:
    policy = egress.EgressPolicy.from_json({"allow": ["pypi.org:443", "svc.ns:80@10.96.0.0/12"], "deny": ["*.evil.io"]})
    credential = tokens.ClaudeCredential("api_key", Secret("sk-ant-pg"))
    with_policy = tokens.Grant(tokens.token_id("ifap_a"), "r", "s", int(time.time()) + 60, credential, egress=policy)
    without = tokens.Grant(tokens.token_id("ifap_b"), "r", "s", int(time.time()) + 60, credential)
    async with fresh_database(postgres_dsn) as url:
        grants = await PostgresRegistry.open(Secret(url), KeyRing.from_spec("1:" + "ab" * 32), cache_ttl_s=0)
        try:
            await grants.insert(with_policy)
            await grants.insert(without)
            assert await grants.resolve(with_policy.id, int(time.time())) == with_policy
            assert await grants.resolve(without.id, int(time.time())) == without
        finally:
            await grants.close()


async def test_git_clones_over_https_through_a_connect_tunnel(tls: Tls, tmp_path: Path) -> None:
    """git's own client (libcurl, ``https_proxy=http://user:TOKEN@…``) and git http-backend over TLS."""
    _, seed = seed_forge(tmp_path, "localhost", {"README.md": "through the egress proxy\n"})
    head = git("rev-parse", "HEAD", cwd=seed).strip()
    async with (
        GitServer(tmp_path / "forge", username="git", password="pw", tls=tls.server) as server,
        _proxy() as (proxy, admin),
    ):
        port = int(server.url.rpartition(":")[2])
        rule = {"host": "localhost", "ports": [port], "addresses": ["127.0.0.1/32", "::1/128"]}
        token = await _token(admin, egress_policy=egress.EgressPolicy.from_json({"allow": [rule]}))
        assert proxy.egress is not None
        env = {
            **GIT_ENV,
            "https_proxy": proxy.egress.replace("http://", f"http://ironflow:{token}@"),
            "NO_PROXY": "",
            "no_proxy": "",
            "GIT_SSL_CAINFO": str(tls.ca),
            "GIT_TERMINAL_PROMPT": "0",
        }
        url = f"https://git:pw@localhost:{port}/localhost/org/repo.git"
        clone = await asyncio.create_subprocess_exec(
            "git", "clone", "--quiet", url, str(tmp_path / "clone"), env=env, stderr=asyncio.subprocess.PIPE
        )
        _, err = await clone.communicate()
        refused = await asyncio.create_subprocess_exec(
            "git", "ls-remote", url.replace(f":{port}/", f":{port + 1}/"), env=env, stderr=asyncio.subprocess.PIPE
        )
        _, refused_err = await refused.communicate()
    assert clone.returncode == 0, err.decode()
    assert (tmp_path / "clone" / "README.md").read_text() == "through the egress proxy\n"
    assert git("rev-parse", "HEAD", cwd=tmp_path / "clone").strip() == head
    assert refused.returncode != 0
    assert b"403" in refused_err


async def test_the_proxy_process_serves_egress_with_its_flag_and_logs_no_token(tls: Tls) -> None:
    admin_port, egress_port = free_port(), free_port()
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN,
        "IRONFLOW_AUTH_PROXY_LISTEN": f"127.0.0.1:{admin_port}",
    }
    argv = [sys.executable, "-m", "ironflow.auth_proxy", "--egress-listen", f"127.0.0.1:{egress_port}"]
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stderr=asyncio.subprocess.PIPE)
    try:
        async with _origin(tls=tls.server) as origin:
            async with AdminClient(f"http://127.0.0.1:{admin_port}", ADMIN) as admin:
                for _ in range(200):
                    with contextlib.suppress(AuthProxyError):
                        token = await _token(admin, f"127.0.0.1:{origin.port}")
                        break
                    await asyncio.sleep(0.05)
            url = f"https://127.0.0.1:{origin.port}/?q=QUERYVALUE"
            code, body, err = await _curl(f"http://127.0.0.1:{egress_port}", token, url, tls)
            assert (code, body) == (0, "hello"), err
    finally:
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), 15)
    lines = [json.loads(line) for line in stderr.decode().splitlines() if line.strip()]
    allowed = [line for line in lines if line["event"] == "egress allowed"]
    assert len(allowed) == 1
    assert allowed[0]["port"] == origin.port
    assert token not in stderr.decode()
    assert "QUERYVALUE" not in stderr.decode()


async def test_a_bad_egress_listen_flag_exits_2_with_one_line() -> None:
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN,
    }
    argv = [sys.executable, "-m", "ironflow.auth_proxy", "--egress-listen", "3128"]
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 2
    assert stderr.decode().count("\n") == 1
    assert "IRONFLOW_AUTH_PROXY_EGRESS_LISTEN must be host:port" in stderr.decode()
