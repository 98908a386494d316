"""A local bubblewrap session opened with an egress policy (``OpenOptions.egress``, the provider's,
or ``ironflow sandbox open --allow-host`` against a ``sandbox serve``): its commands reach what the
policy allows through the egress proxy (no Claude key), and nothing else.

Real bubblewrap, the session runtime, curl inside, and TLS origins on the host's 127.0.0.2 (the
sandbox's own 127.0.0.1 and localhost bypass the proxy). curl runs with ``-k``: the certificate
check through the proxy is shown with a CA in tests/local/integration/test_local_egress_clients.py.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.tls_origin import hello_origin, make_tls
from tests.sessions.integration.serving import Served, ironflow

from ironflow import egress, errors
from ironflow.local import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import OpenOptions

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


@pytest.fixture
async def origin_port(tmp_path: Path) -> AsyncIterator[int]:
    async with hello_origin("127.0.0.2", make_tls(tmp_path, extra_ips=("127.0.0.2",)).server) as port:
        yield port


def _allow(*rules: str) -> egress.EgressPolicy:
    return egress.EgressPolicy(allow=tuple(egress.parse_allow_host(rule) for rule in rules))


def _curl(port: int) -> list[str]:
    script = f'out=$(curl -sSk --max-time 20 https://127.0.0.2:{port}/ 2>&1); code=$?; echo "$out"; echo exit=$code'
    return ["sh", "-c", script]


async def test_a_sessions_commands_reach_what_its_policy_allows(tmp_path: Path, origin_port: int) -> None:
    provider = LocalSandboxProvider(timeout=60)
    async with LocalSessions(provider, state_dir=str(tmp_path)) as sessions:
        async with await sessions.open(OpenOptions(ttl=60, egress=_allow(f"127.0.0.2:{origin_port}"))) as sandbox:
            allowed = await sandbox.commands.run(_curl(origin_port))
            other = await sandbox.commands.run(_curl(origin_port + 1))
        async with await sessions.open(OpenOptions(ttl=60)) as sandbox:
            without = await sandbox.commands.run(_curl(origin_port))
            variables = await sandbox.commands.run(["sh", "-c", "env | grep -ci '^https*_proxy=' || true"])
    assert allowed.stdout.split() == ["hello", "exit=0"], allowed.stdout
    assert "403" in other.stdout
    assert "exit=0" not in other.stdout
    assert "hello" not in without.stdout
    assert variables.stdout.strip() == "0"


async def test_the_providers_policy_reaches_its_sessions(tmp_path: Path, origin_port: int) -> None:
    provider = LocalSandboxProvider(timeout=60, egress=_allow(f"127.0.0.2:{origin_port}"))
    async with (
        LocalSessions(provider, state_dir=str(tmp_path)) as sessions,
        await sessions.open(OpenOptions(ttl=60)) as sandbox,
    ):
        allowed = await sandbox.commands.run(_curl(origin_port))
    assert allowed.stdout.split() == ["hello", "exit=0"], allowed.stdout


async def test_a_gvisor_session_refuses_a_policy_it_cannot_serve(tmp_path: Path) -> None:
    if shutil.which("runsc") is None:
        pytest.skip("gVisor not installed")
    provider = LocalSandboxProvider(isolation="gvisor", timeout=60)
    async with LocalSessions(provider, state_dir=str(tmp_path)) as sessions:
        with pytest.raises(errors.ConfigError, match="needs isolation 'bwrap'"):
            await sessions.open(OpenOptions(ttl=60, egress=_allow("pypi.org")))


async def test_sandbox_open_allow_host_opens_a_served_sessions_egress(served: Served, origin_port: int) -> None:
    opened = await asyncio.to_thread(
        ironflow, "sandbox", "open", "--allow-host", f"127.0.0.2:{origin_port}", env=served.env
    )
    assert opened.returncode == 0, opened.stderr
    sandbox_id = opened.stdout.strip()
    done = await asyncio.to_thread(ironflow, "sandbox", "exec", sandbox_id, "--", *_curl(origin_port), env=served.env)
    assert done.stdout.split() == ["hello", "exit=0"], (done.stdout, done.stderr)
    await asyncio.to_thread(ironflow, "sandbox", "close", sandbox_id, env=served.env)
    bad = await asyncio.to_thread(ironflow, "sandbox", "open", "--egress-profile", "nope", env=served.env)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: unknown egress profile 'nope'")
    assert len(bad.stderr.strip().splitlines()) == 1
