"""``KubeApi.exec`` through a real kube-apiserver to kwok, whose ``ClusterExec`` rule runs the
command on this host (scoped to the test's namespace); and ``ironflow check``'s exec probes over
that path. Skipped when the binaries are not built.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from tests.fakes.exec_pod import POD, exec_namespace

from ironflow import errors
from ironflow.cli import check as check_cli
from ironflow.cluster import checks
from ironflow.kube import api as k8s
from ironflow.testing.kubeenv import KubeEnv
from ironflow.testing.polling import eventually


@pytest.fixture
def ns(kube_env: KubeEnv, tmp_path: Path) -> Iterator[str]:
    with exec_namespace(kube_env, tmp_path, "exec") as name:
        yield name


@pytest.fixture
async def api(kube_env: KubeEnv, ns: str) -> AsyncIterator[k8s.KubeApi]:
    async with await k8s.KubeApi.connect(kube_env.cluster_config()) as client:
        await client.create(k8s.PODS, ns, POD)

        async def running() -> bool:
            return bool((await client.get(k8s.PODS, ns, "box")).get("status", {}).get("phase") == "Running")

        await eventually(running, interval_s=0.1, what="kwok to start the pod")
        yield client


async def test_exec_returns_both_streams_from_the_work_dir(api: k8s.KubeApi, ns: str, tmp_path: Path) -> None:
    async with asyncio.timeout(20):
        out = await api.exec(ns, "box", ("sh", "-c", "pwd; echo oops >&2"))
    assert out.exit_code == 0
    assert out.stdout.decode().strip() == str(tmp_path)
    assert out.stderr == b"oops\n"


@pytest.mark.xfail(
    strict=True,
    raises=errors.KubernetesError,
    reason="kwok reports a non-zero exit as an InternalError status; a kubelet answers NonZeroExitCode "
    "with the code, which KubeApi.exec returns as exit_code",
)
async def test_exec_returns_a_non_zero_exit_code(api: k8s.KubeApi, ns: str) -> None:
    async with asyncio.timeout(20):
        out = await api.exec(ns, "box", ("sh", "-c", "exit 3"))
    assert out.exit_code == 3


async def test_exec_sends_stdin_of_a_known_length(api: k8s.KubeApi, ns: str) -> None:
    async with asyncio.timeout(20):
        out = await api.exec(ns, "box", ("head", "-c", "5"), stdin=b"hello")
    assert (out.exit_code, out.stdout) == (0, b"hello")


async def test_check_exec_probes_round_trip_through_the_real_apiserver(api: k8s.KubeApi, ns: str) -> None:
    """kwok runs each probe on this host, not in a container, so only the round trip is
    meaningful: every probe is decided (never skipped), the SA-token row follows this host's own
    directory, and a target this host reaches is reported as open egress. The posture itself
    (read-only root, isolation) is tested with bubblewrap in ``test_cli_check_exec.py``."""
    app = web.Application()
    app.router.add_get("/", _unauthorized)
    async with TestServer(app, host="127.0.0.1") as target:
        url = str(target.make_url("/"))
        results = await check_cli.run_checks(api, namespace=ns, pod="box", auth_proxy_url=url, egress_url=url)
    rows = {r.check: r for r in results}
    exec_rows = {p.name: rows[p.name] for p in checks.EXEC_PROBES}
    assert {r.outcome for r in exec_rows.values()} <= {checks.Outcome.PASS, checks.Outcome.FAIL}, exec_rows
    host_has_token_dir = await asyncio.to_thread(Path(checks.SA_TOKEN_DIR).exists)
    expected = checks.Outcome.FAIL if host_has_token_dir else checks.Outcome.PASS
    assert exec_rows["SA token directory absent (exec)"].outcome is expected
    egress = exec_rows["egress limited to the profile (exec)"]
    assert egress.outcome is checks.Outcome.FAIL
    assert "egress is not limited" in egress.why


async def _unauthorized(_: web.Request) -> web.Response:
    return web.Response(status=401)
