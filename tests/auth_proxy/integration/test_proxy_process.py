"""The proxy as a process: ``python -m ironflow.auth_proxy`` and ``ironflow auth-proxy``.

Starts the real entry points with an environment, as a Deployment would, talks to them
over TCP, stops them with SIGTERM, and scans their real stderr (JSON log lines) for
secrets.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping

import aiohttp
import pytest

from ironflow.auth_proxy import AdminClient, Credential
from ironflow.fake_model.server import FakeAnthropic
from ironflow.secrets import Secret, find_leaks
from ironflow.testing.polling import eventually
from ironflow.testing.ports import free_port

ADMIN = "admin-key-" + "m" * 40
OAUTH = "sk-ant-oat01-PROCESS-CREDENTIAL"
KEYS = "1:" + "ef" * 32


def _env(port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRONFLOW_", "ANTHROPIC_", "CLAUDE_"))}
    env.update({"IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN, "IRONFLOW_AUTH_PROXY_LISTEN": f"127.0.0.1:{port}", **extra})
    return env


async def _wait_healthy(url: str, proc: asyncio.subprocess.Process) -> None:
    async with aiohttp.ClientSession() as http:

        async def healthy() -> bool:
            assert proc.returncode is None, "the proxy process exited early"
            try:
                async with http.get(url + "/healthz") as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(healthy, limit_s=20, interval_s=0.1, what="the proxy to answer /healthz")


async def _start(argv: list[str], env: Mapping[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv, env=dict(env), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def _relay_once(url: str) -> str:
    async with AdminClient(url, ADMIN) as admin:
        issued = await admin.issue(
            "run-p", "s", int(time.time()) + 60, credential=Credential("oauth_token", Secret(OAUTH))
        )
        token = issued.token.reveal()
        async with aiohttp.ClientSession() as http:
            body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
            async with http.post(
                url + "/v1/messages?q=QUERYVALUE", json=body, headers={"x-api-key": token}
            ) as response:
                assert response.status == 200
        assert await admin.revoke(issued.id)
    return token


async def test_module_entry_serves_logs_json_and_stops_gracefully_on_sigterm() -> None:
    port = free_port()
    async with FakeAnthropic() as fake:
        proc = await _start(
            [sys.executable, "-m", "ironflow.auth_proxy"], _env(port, IRONFLOW_AUTH_PROXY_UPSTREAM=fake.url)
        )
        url = f"http://127.0.0.1:{port}"
        try:
            await _wait_healthy(url, proc)
            token = await _relay_once(url)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 0
    lines = [json.loads(line) for line in stderr.decode().splitlines() if line.strip()]
    events = [line["event"] for line in lines]
    assert "auth proxy listening" in events
    assert "token issued" in events
    assert "relayed" in events
    assert "auth proxy shutting down" in events
    assert not find_leaks([ADMIN, OAUTH, token, "QUERYVALUE"], stderr.decode())


async def test_bad_configuration_exits_2_with_one_line() -> None:
    env = _env(free_port())
    env["IRONFLOW_AUTH_PROXY_ADMIN_KEY"] = "too-short"
    proc = await _start([sys.executable, "-m", "ironflow.auth_proxy"], env)
    _, stderr = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 2
    assert stderr.decode().strip().count("\n") == 0
    assert "IRONFLOW_AUTH_PROXY_ADMIN_KEY must be at least 32 characters" in stderr.decode()
    assert "too-short" not in stderr.decode()


async def test_database_without_key_ring_refuses_to_start() -> None:
    env = _env(free_port(), IRONFLOW_AUTH_PROXY_DATABASE_URL="postgresql://u:pw@127.0.0.1:9/x")
    proc = await _start([sys.executable, "-m", "ironflow.auth_proxy"], env)
    _, stderr = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 2
    assert "is set but no encryption key is configured" in stderr.decode()
    assert "pw@" not in stderr.decode()


@pytest.mark.postgres
async def _listening_pids(proc: asyncio.subprocess.Process, want: int, kept: list[bytes]) -> set[int]:
    """The pids of the workers that logged "auth proxy listening", once ``want`` have; every line
    read is kept in ``kept`` (the rest is read at the end)."""
    assert proc.stderr is not None
    pids: set[int] = set()
    while len(pids) < want:
        line = await proc.stderr.readline()
        assert line, "the proxy ended before its workers listened: " + b"".join(kept).decode()[-2000:]
        kept.append(line)
        if b'"auth proxy listening"' in line:
            pids.add(int(json.loads(line)["pid"]))
    return pids


async def test_cli_serves_several_workers_on_one_port_with_postgres(postgres_dsn: str) -> None:
    port = free_port()
    async with FakeAnthropic() as fake:
        env = _env(port, IRONFLOW_AUTH_PROXY_UPSTREAM=fake.url, IRONFLOW_AUTH_PROXY_DATABASE_URL=postgres_dsn,
                   IRONFLOW_SECRET_KEYS=KEYS)  # fmt: skip
        ironflow = os.path.join(os.path.dirname(sys.executable), "ironflow")
        proc = await _start([ironflow, "auth-proxy", "serve", "--workers", "2"], env)
        url = f"http://127.0.0.1:{port}"
        early: list[bytes] = []
        try:
            # One worker answering is not both listening: under load the second starts later,
            # and a proxy stopped before then logged one "listening" line (seen once).
            pids = await asyncio.wait_for(_listening_pids(proc, 2, early), 30)
            await _wait_healthy(url, proc)
            for _ in range(4):  # connections spread over both workers; every token works on each
                await _relay_once(url)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, rest = await asyncio.wait_for(proc.communicate(), 20)
    stderr = b"".join(early) + rest
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert len(pids) == 2
    assert not find_leaks([ADMIN, OAUTH, postgres_dsn], stderr.decode())


@pytest.mark.postgres
def test_cli_rotate_keys_reports_resealed_grants(postgres_dsn: str) -> None:
    async def issue_under_key_1() -> None:
        from ironflow.auth_proxy import KeyRing
        from ironflow.auth_proxy.postgres import PostgresRegistry
        from ironflow.auth_proxy.tokens import ClaudeCredential, Grant, new_token, token_id

        opened = await PostgresRegistry.open(Secret(postgres_dsn), KeyRing.from_spec(KEYS))
        try:
            credential = ClaudeCredential("api_key", Secret("sk-ant-rot"))
            await opened.insert(
                Grant(token_id(new_token().reveal()), "run-rot", "s", int(time.time()) + 60, credential)
            )
        finally:
            await opened.close()

    asyncio.run(issue_under_key_1())
    ironflow = os.path.join(os.path.dirname(sys.executable), "ironflow")
    env = _env(free_port(), IRONFLOW_AUTH_PROXY_DATABASE_URL=postgres_dsn,
               IRONFLOW_SECRET_KEYS=KEYS + ",2:" + "01" * 32)  # fmt: skip
    done = subprocess.run([ironflow, "auth-proxy", "rotate-keys"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "resealed=" in done.stdout
    assert "active_key_version=2" in done.stdout
    assert int(done.stdout.split("resealed=")[1].split()[0]) >= 1
    again = subprocess.run([ironflow, "auth-proxy", "rotate-keys"], env=env, capture_output=True, text=True, timeout=30)
    assert "resealed=0" in again.stdout


async def test_cli_revoke_run_and_revoke_reach_a_running_proxy() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = await _start([sys.executable, "-m", "ironflow.auth_proxy"], _env(port))
    ironflow = os.path.join(os.path.dirname(sys.executable), "ironflow")
    try:
        await _wait_healthy(url, proc)
        async with AdminClient(url, ADMIN) as admin:
            credential = Credential("api_key", Secret("sk-ant-cli"))
            first = await admin.issue("run-cli", "a", int(time.time()) + 60, credential=credential)
            await admin.issue("run-cli", "b", int(time.time()) + 60, credential=credential)
        env = _env(port, IRONFLOW_AUTH_PROXY_URL=url)
        one = await _start([ironflow, "auth-proxy", "revoke", first.id], env)
        out, err = await asyncio.wait_for(one.communicate(), 30)
        assert (one.returncode, out.decode().strip()) == (0, "revoked=1"), err.decode()
        run = await _start([ironflow, "auth-proxy", "revoke-run", "run-cli", "--url", url], env)
        out, err = await asyncio.wait_for(run.communicate(), 30)
        assert (run.returncode, out.decode().strip()) == (0, "revoked=1"), err.decode()
        no_url = await _start([ironflow, "auth-proxy", "revoke-run", "run-cli"], _env(port))
        _, err = await asyncio.wait_for(no_url.communicate(), 30)
        assert no_url.returncode == 2
        assert "IRONFLOW_AUTH_PROXY_URL" in err.decode()
        assert ADMIN not in err.decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 15)


async def test_sigterm_lets_an_open_stream_finish() -> None:
    """Graceful shutdown: a stream already relayed when SIGTERM arrives still completes."""
    from ironflow.fake_model.server import Script, TextTurn

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with FakeAnthropic(Script.of(default=TextTurn("slow but whole", delay_s=1.0))) as fake:
        proc = await _start(
            [sys.executable, "-m", "ironflow.auth_proxy"], _env(port, IRONFLOW_AUTH_PROXY_UPSTREAM=fake.url)
        )
        signalled = False
        try:
            await _wait_healthy(url, proc)
            async with AdminClient(url, ADMIN) as admin:
                issued = await admin.issue(
                    "run-g", "s", int(time.time()) + 60, credential=Credential("api_key", Secret("sk-ant-g"))
                )
            body = {"model": "m", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            async with aiohttp.ClientSession() as http:
                request = asyncio.ensure_future(
                    http.post(url + "/v1/messages", json=body, headers={"x-api-key": issued.token.reveal()})
                )
                await asyncio.sleep(0.4)  # the request is in flight, waiting on the upstream
                proc.send_signal(signal.SIGTERM)
                signalled = True
                response = await asyncio.wait_for(request, 10)
                async with response:
                    assert response.status == 200
                    assert "slow but whole" in await response.text()
        finally:
            if not signalled:
                proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 0
