"""``ironflow check``'s exec probes through a real kube-apiserver to kwok. kwok's ``ClusterExec``
runs each probe **on this host** (no container), so only the round trip is meaningful here:
every probe is decided (never skipped), the SA-token row follows this host's own directory,
and an egress target this host can reach is reported as open. The posture itself (read-only
root, isolation) is tested with bubblewrap in ``test_cli_check_exec.py``. Skipped when the
binaries are not built."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from ironflow.cli import check as check_cli
from ironflow.k8s import api as k8s
from ironflow.k8s import checks
from ironflow.testing.kubeenv import KubeEnv

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "box"},
    "spec": {"containers": [{"name": "main", "image": "img"}], "restartPolicy": "Never"},
}


@pytest.fixture
def ns(kube_env: KubeEnv, tmp_path: Path) -> Iterator[str]:
    with kube_env.namespace(f"chk-{uuid.uuid4().hex[:8]}") as name:
        kube_env.allow_exec(name, tmp_path)
        yield name


async def _refuse(_: web.Request) -> web.Response:
    return web.Response(status=401)


@pytest.fixture
async def reachable_url() -> AsyncIterator[str]:
    """A loopback HTTP server: reachable from this host, so from kwok's exec."""
    app = web.Application()
    app.router.add_get("/{tail:.*}", _refuse)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_exec_probes_round_trip_through_the_real_apiserver(
    kube_env: KubeEnv, ns: str, reachable_url: str
) -> None:
    async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
        await api.create(k8s.PODS, ns, POD)
        deadline = time.monotonic() + 15
        while (await api.get(k8s.PODS, ns, "box")).get("status", {}).get("phase") != "Running":
            assert time.monotonic() < deadline, "kwok did not start the pod"
            await asyncio.sleep(0.1)
        results = await check_cli.run_checks(
            api, namespace=ns, pod="box", auth_proxy_url=reachable_url, egress_url=reachable_url
        )
    rows = {r.check: r for r in results}
    exec_rows = {p.name: rows[p.name] for p in checks.EXEC_PROBES}
    assert {r.outcome for r in exec_rows.values()} <= {checks.Outcome.PASS, checks.Outcome.FAIL}, exec_rows
    token = exec_rows["SA token directory absent (exec)"].outcome
    host_has_token_dir = await asyncio.to_thread(Path(checks.SA_TOKEN_DIR).exists)
    assert token is (checks.Outcome.FAIL if host_has_token_dir else checks.Outcome.PASS)
    egress = exec_rows["egress limited to the profile (exec)"]
    assert egress.outcome is checks.Outcome.FAIL
    assert "egress is not limited" in egress.why
