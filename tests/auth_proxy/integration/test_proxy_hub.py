"""Several worker processes sharing one in-memory registry through the parent's hub socket."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from ironflow.auth_proxy import AuthProxyConfig, Credential, hub, registry, run_auth_proxy, tokens
from ironflow.fake_model.server import FakeAnthropic
from ironflow.secrets import Secret
from ironflow.testing.polling import eventually
from ironflow.testing.ports import free_port

ADMIN = "admin-key-" + "u" * 40
NOW = int(time.time())


def _soon(seconds: int) -> int:
    """An expiry from the clock at call time: the suite may run long after import."""
    return int(time.time()) + seconds


def _grant(run_id: str = "run-1") -> tokens.Grant:
    token = tokens.new_token().reveal()
    credential = tokens.ClaudeCredential("oauth_token", Secret("sk-ant-hub"))
    return tokens.Grant(tokens.token_id(token), run_id, "s", NOW + 300, credential, tokens.Limits(max_requests=5))


async def test_workers_share_grants_and_see_revocations_at_once(tmp_path: Path) -> None:
    async with hub.serve_hub(str(tmp_path / "hub" / "registry.sock")) as path:
        first, second = hub.HubRegistry(path), hub.HubRegistry(path)
        try:
            grant = _grant()
            await first.insert(grant)
            assert await second.resolve(grant.id, NOW) == grant  # now cached in the second worker
            assert await second.resolve(grant.id, NOW) == grant
            started = time.perf_counter()
            assert await first.revoke(grant.id)
            while await second.resolve(grant.id, NOW) is not registry.Resolution.REVOKED:
                assert time.perf_counter() - started < 1.0
                await asyncio.sleep(0.001)
            print(f"revocation seen by the other worker after {(time.perf_counter() - started) * 1000:.2f} ms")
            others = [_grant("run-x"), _grant("run-x")]
            for other in others:
                await first.insert(other)
                await second.resolve(other.id, NOW)
            assert await first.revoke_run("run-x") == 2
            await asyncio.sleep(0.05)
            assert [await second.resolve(o.id, NOW) for o in others] == [registry.Resolution.REVOKED] * 2
            assert await second.take_request(others[0].id) == registry.Usage(0, 0)
            assert await first.count() == 0
        finally:
            await first.close()
            await second.close()


async def test_a_lost_hub_is_503_not_401(tmp_path: Path) -> None:
    path = str(tmp_path / "hub" / "registry.sock")
    async with FakeAnthropic() as fake:
        async with hub.serve_hub(path):
            config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=fake.url, hub_socket=path)
            async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin:
                credential = Credential("api_key", Secret("sk-ant-k"))
                issued = await admin.issue("r", "s", _soon(60), credential=credential)
                headers = {"x-api-key": issued.token.reveal()}
                body = {"model": "m", "max_tokens": 1, "messages": []}
                async with (
                    aiohttp.ClientSession() as http,
                    http.post(proxy.url + "/v1/messages", json=body, headers=headers) as response,
                ):
                    assert response.status == 200
        async with (
            run_auth_proxy(config) as proxy,
            aiohttp.ClientSession() as http,
            http.post(proxy.url + "/v1/messages", json=body, headers=headers) as response,
        ):
            assert response.status == 503


def test_hub_registry_debug_shows_no_grant(tmp_path: Path) -> None:
    assert "sk-ant" not in repr(hub.HubRegistry(str(tmp_path / "x.sock")))


@pytest.mark.parametrize("workers", [2])
async def test_module_entry_with_workers_and_no_database_shares_the_memory_registry(workers: int) -> None:
    import os
    import signal
    import sys

    from ironflow.auth_proxy import AdminClient

    port = free_port()
    async with FakeAnthropic() as fake:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("IRONFLOW_", "ANTHROPIC_"))}
        env.update({"IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN, "IRONFLOW_AUTH_PROXY_LISTEN": f"127.0.0.1:{port}",
                    "IRONFLOW_AUTH_PROXY_UPSTREAM": fake.url})  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ironflow.auth_proxy", "--workers", str(workers),
            env=env, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        assert proc.stderr is not None
        log_lines: list[str] = []

        async def read_log() -> None:
            assert proc.stderr is not None
            async for raw in proc.stderr:
                log_lines.append(raw.decode())

        reader = asyncio.create_task(read_log())

        def listening() -> int:
            return sum('"auth proxy listening"' in line for line in log_lines)

        try:
            async with aiohttp.ClientSession() as http:

                async def healthy() -> bool:
                    try:
                        async with http.get(url + "/healthz") as response:
                            return response.status == 200
                    except aiohttp.ClientError:
                        return False

                await eventually(healthy, interval_s=0.05, what="the proxy to answer /healthz")
                await eventually(lambda: listening() == workers, what=f"{workers} workers to listen")
                async with AdminClient(url, ADMIN) as admin:
                    credential = Credential("oauth_token", Secret("sk-ant-workers"))
                    issued = [await admin.issue("run-w", "s", _soon(60), credential=credential) for _ in range(6)]
                    body = {"model": "m", "max_tokens": 1, "messages": []}
                    statuses = []
                    for item in issued:  # fresh connections: the kernel spreads them over the workers
                        async with (
                            aiohttp.ClientSession() as fresh,
                            fresh.post(
                                url + "/v1/messages", json=body, headers={"x-api-key": item.token.reveal()}
                            ) as response,
                        ):
                            statuses.append(response.status)
                    assert statuses == [200] * 6
                    assert await admin.revoke_run("run-w") == 6
                    for item in issued:
                        async with (
                            aiohttp.ClientSession() as fresh,
                            fresh.post(
                                url + "/v1/messages", json=body, headers={"x-api-key": item.token.reveal()}
                            ) as response,
                        ):
                            assert response.status == 401
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 20)
            await asyncio.wait_for(reader, 20)
    assert proc.returncode == 0, "".join(log_lines)[-2000:]
    assert listening() == workers


def _children_of(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    return [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()]


def _gone(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "zombie" in status.read_text()


async def test_a_worker_dying_stops_the_whole_process_group_with_a_failure() -> None:
    """Half a proxy is worse than a restarted one: the parent stops the other worker and fails."""
    import os
    import signal
    import sys

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRONFLOW_", "ANTHROPIC_"))}
    env.update({"IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN, "IRONFLOW_AUTH_PROXY_LISTEN": f"127.0.0.1:{port}"})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ironflow.auth_proxy", "--workers", "2", env=env, stderr=asyncio.subprocess.PIPE
    )

    def two_workers() -> list[int] | None:
        children = _children_of(proc.pid)
        return children if len(children) == 2 else None

    children: list[int] = await eventually(two_workers, interval_s=0.05, what="the two workers to start")
    await asyncio.sleep(0.5)
    os.kill(children[0], signal.SIGKILL)
    _, stderr = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode != 0
    assert "auth proxy worker exited; stopping the others" in stderr.decode()
    assert _gone(children[1])


async def test_purge_keeps_the_worker_cache_bounded(tmp_path: Path) -> None:
    async with hub.serve_hub(str(tmp_path / "hub" / "registry.sock")) as path:
        worker = hub.HubRegistry(path)
        try:
            short = tokens.Grant("a" * 64, "r", "s", NOW + 5, tokens.ClaudeCredential("api_key", Secret("sk-ant-c")))
            await worker.insert(short)
            await worker.resolve(short.id, NOW)
            assert "cached=1" in repr(worker)
            await worker.purge_expired(NOW + 5)
            assert "cached=0" in repr(worker)
        finally:
            await worker.close()
