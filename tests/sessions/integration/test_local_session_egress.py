"""A local session opened with an egress policy (``OpenOptions.egress``, the provider's, or ``ironflow
sandbox open --allow-host`` against a ``sandbox serve``), under bubblewrap, gVisor and Docker: its
commands reach what the policy allows through the egress proxy (no Claude key), get the proxy's 403
for anything else, reach nothing directly, and the session's egress token is revoked at close.

Real bubblewrap, runsc, dockerd (:mod:`tests.fakes.docker_daemon`; Podman's Docker API too for the
first test), the session runtime, curl inside, and a TLS origin on the host's 127.0.0.2 with a test
CA the test uploads into the session (the sandbox's own 127.0.0.1 and localhost bypass the proxy;
its 127.0.0.2 is its own loopback's).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import SESSION_ISOLATIONS, SESSION_PODMAN
from tests.fakes.tls_origin import OriginTls, hello_origin, make_tls
from tests.sessions.integration.serving import TOKEN, cli_env, ironflow, start_serve

from ironflow import egress
from ironflow.auth_proxy import tokens
from ironflow.local import LocalSandboxProvider
from ironflow.local.sandbox import environment
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import OpenOptions


@pytest.fixture
async def origin(tmp_path: Path) -> AsyncIterator[tuple[int, OriginTls]]:
    """A TLS server on the host's 127.0.0.2 answering ``hello``; its port and its test PKI."""
    tls = make_tls(tmp_path, extra_ips=("127.0.0.2",))
    async with hello_origin("127.0.0.2", tls.server) as port:
        yield port, tls


CA = ("--cacert", "ca.pem")


def _allow(*rules: str) -> egress.EgressPolicy:
    return egress.EgressPolicy(allow=tuple(egress.parse_allow_host(rule) for rule in rules))


def _curl(port: int, *flags: str) -> list[str]:
    """curl of the origin at ``port`` (with the CA uploaded as ``ca.pem``: ``--cacert ca.pem``); its
    output, then ``exit=<code>``."""
    fetch = f"curl -sS --max-time 20 {' '.join(flags)} https://127.0.0.2:{port}/"
    return ["sh", "-c", f'out=$({fetch} 2>&1); code=$?; echo "$out"; echo exit=$code']


@pytest.mark.parametrize("isolation", [*SESSION_ISOLATIONS, SESSION_PODMAN])
async def test_a_sessions_commands_reach_what_its_policy_allows(
    isolation: environment.Isolation,
    state: Path,
    origin: tuple[int, OriginTls],
    caplog: pytest.LogCaptureFixture,
) -> None:
    port, tls = origin
    caplog.set_level(logging.INFO, logger="ironflow.local")
    provider = LocalSandboxProvider(isolation=isolation, timeout=60)
    async with provider.sessions(state_dir=str(state)) as sessions:
        async with await sessions.open(OpenOptions(ttl=120, egress=_allow(f"127.0.0.2:{port}"))) as sandbox:
            await sandbox.files.write("ca.pem", tls.ca_pem)
            allowed = await sandbox.commands.run(_curl(port, *CA))
            denied = await sandbox.commands.run(_curl(port + 1, *CA))
            direct = await sandbox.commands.run(_curl(port, *CA, "--noproxy", "'*'"))
            proxy_url = (await sandbox.commands.run(["sh", "-c", "echo $HTTPS_PROXY"])).stdout.strip()
            (egress_socket,) = await asyncio.to_thread(lambda: list(state.glob("*/egress.sock")))
        async with await sessions.open(OpenOptions(ttl=120)) as sandbox:
            await sandbox.files.write("ca.pem", tls.ca_pem)
            without = await sandbox.commands.run(_curl(port, *CA))
            variables = await sandbox.commands.run(["sh", "-c", "env | grep -ci '^https*_proxy=' || true"])
    assert allowed.stdout.split() == ["hello", "exit=0"], allowed.stdout  # the CA checked through the tunnel
    assert "403" in denied.stdout, denied.stdout  # the proxy's denial, not a network error
    assert "exit=0" not in denied.stdout
    assert "hello" not in direct.stdout, direct.stdout  # the host's 127.0.0.2 is out of reach but for the proxy
    assert "exit=0" not in direct.stdout
    assert "hello" not in without.stdout
    assert variables.stdout.strip() == "0"
    # The session's egress token was revoked as it closed, and its proxy is gone with it.
    token = proxy_url.removeprefix("http://ironflow:").partition("@")[0]
    assert token.startswith("ifap_"), "the proxy URL carries the session's egress token"
    assert f"auth proxy token revoked: token={tokens.token_id(token)[:12]}" in caplog.text
    assert not egress_socket.exists()


@pytest.mark.parametrize("isolation", SESSION_ISOLATIONS[:1])
async def test_the_providers_policy_reaches_its_sessions(
    isolation: environment.Isolation, tmp_path: Path, origin: tuple[int, OriginTls]
) -> None:
    port, tls = origin
    provider = LocalSandboxProvider(isolation=isolation, timeout=60, egress=_allow(f"127.0.0.2:{port}"))
    async with (
        LocalSessions(provider, state_dir=str(tmp_path)) as sessions,
        await sessions.open(OpenOptions(ttl=60)) as sandbox,
    ):
        await sandbox.files.write("ca.pem", tls.ca_pem)
        allowed = await sandbox.commands.run(_curl(port, *CA))
    assert allowed.stdout.split() == ["hello", "exit=0"], allowed.stdout


@pytest.mark.parametrize("isolation", SESSION_ISOLATIONS)
async def test_sandbox_open_allow_host_opens_a_served_sessions_egress(
    isolation: str, origin: tuple[int, OriginTls]
) -> None:
    port, _ = origin
    served = start_serve(cli_env(IRONFLOW_SANDBOX_TOKEN=TOKEN), "--isolation", isolation)
    try:
        opened = await asyncio.to_thread(
            ironflow, "sandbox", "open", "--allow-host", f"127.0.0.2:{port}", env=served.env
        )
        assert opened.returncode == 0, opened.stderr
        sandbox_id = opened.stdout.strip()
        curl = _curl(port, "-k")  # the CA's check through the proxy: the test above
        done = await asyncio.to_thread(ironflow, "sandbox", "exec", sandbox_id, "--", *curl, env=served.env)
        assert done.stdout.split() == ["hello", "exit=0"], (done.stdout, done.stderr)
        await asyncio.to_thread(ironflow, "sandbox", "close", sandbox_id, env=served.env)
        bad = await asyncio.to_thread(ironflow, "sandbox", "open", "--egress-profile", "nope", env=served.env)
        assert bad.returncode == 2
        assert bad.stderr.startswith("error: unknown egress profile 'nope'")
        assert len(bad.stderr.strip().splitlines()) == 1
    finally:
        served.stop()
        for stream in (served.proc.stdout, served.proc.stderr):
            if stream is not None:
                stream.close()
