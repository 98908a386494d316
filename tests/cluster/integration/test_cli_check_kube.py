"""``ironflow check`` against the Kubernetes API test server and the real auth proxy: a provider-
rendered pod passes the pod checks, a broken pod fails them, the proxy answers 401 to an unknown
token, and the command exits 0/1/3 as documented (no pod is Running here, so the exec probes are
skipped; they run in test_cli_check_exec.py). On the test server the worker's NetworkPolicy
grant is its ``deny`` rule, which its SubjectAccessReview answers from."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from ironflow import labels
from ironflow.auth_proxy import app as proxy_app
from ironflow.auth_proxy import config as proxy_config
from ironflow.cli import check as check_cli
from ironflow.cluster import checks
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
STEP = AgentConfig("review").scoped("run-1", "review").pod_label(labels.LABEL_ROOT_RUN_ID, "run-1")
POD_CHECKS = {"security context", "secrets by reference", "no service-account token", "run/root/step labels and expiry"}


def _pod(namespace: str, name: str) -> dict[str, Any]:
    provider = K8sEphemeralProvider.sandboxed(IMAGE).namespace(namespace).oauth_token_from_secret("claude", "token")
    return provider.manifests(STEP, now=2_000_000_000, pod_name=name)[-1]


def _by_check(results: list[checks.CheckResult]) -> dict[str, checks.CheckResult]:
    return {r.check: r for r in results}


def _deny_networkpolicies(kube: Any) -> None:
    """On the test server, the worker Role's missing grant (a real server has no such Role)."""
    if kube.server is not None:
        kube.server.deny("networkpolicies", "create", kube.namespace)


async def test_a_provider_pod_passes_and_the_run_exits_3_for_what_could_not_run(kube: Any) -> None:
    _deny_networkpolicies(kube)
    await kube.api.create(api.PODS, kube.namespace, _pod(kube.namespace, "claude-code-good"))
    results = await check_cli.run_checks(kube.api, namespace=kube.namespace)
    by_check = _by_check(results)
    assert {by_check[c].outcome for c in POD_CHECKS} == {checks.Outcome.PASS}
    review = by_check["worker cannot create networkpolicies"]
    assert review.outcome is checks.Outcome.PASS
    assert "SubjectAccessReview" in review.why
    assert "no Running agent pod" in by_check["root filesystem read-only (exec)"].why
    assert check_cli.exit_code(results) == 3


async def test_the_test_servers_review_follows_its_deny_rules(kube: Any) -> None:
    server = kube.need_server()
    review = _by_check(await check_cli.run_checks(kube.api, namespace=kube.namespace))
    assert review["worker cannot create networkpolicies"].outcome is checks.Outcome.FAIL
    server.deny("networkpolicies", "create")  # cluster-wide
    review = _by_check(await check_cli.run_checks(kube.api, namespace=kube.namespace))
    assert review["worker cannot create networkpolicies"].outcome is checks.Outcome.PASS


async def test_a_broken_pod_fails_its_checks_and_the_run_exits_1(kube: Any) -> None:
    await kube.api.create(api.PODS, kube.namespace, _pod(kube.namespace, "claude-code-good"))
    bad = copy.deepcopy(_pod(kube.namespace, "claude-code-bad"))
    container = bad["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFilesystem"] = False
    container["env"] = [*container["env"], {"name": "ANTHROPIC_API_KEY", "value": "plain-key-value"}]
    del bad["metadata"]["annotations"]
    await kube.api.create(api.PODS, kube.namespace, bad)
    results = await check_cli.run_checks(kube.api, namespace=kube.namespace)
    by_check = _by_check(results)
    for name in ("security context", "secrets by reference", "run/root/step labels and expiry"):
        assert by_check[name].outcome is checks.Outcome.FAIL
        assert "claude-code-bad" in by_check[name].why
        assert "claude-code-good" not in by_check[name].why
    assert "plain-key-value" not in json.dumps([r.why for r in results])
    assert check_cli.exit_code(results) == 1


async def test_a_scoped_pod_passes_and_a_bearer_claude_key_fails(kube: Any) -> None:
    """Issue 33: ``AgentConfig.scoped(run, step)`` renders no root-run-id label, and a value that
    holds a Claude key after a word is refused by render, so check answers alike."""
    _deny_networkpolicies(kube)
    provider = K8sEphemeralProvider.sandboxed(IMAGE).namespace(kube.namespace).oauth_token_from_secret("c", "t")
    scoped = AgentConfig("review").scoped("run-1", "review")
    await kube.api.create(api.PODS, kube.namespace, provider.manifests(scoped, pod_name="claude-code-scoped")[-1])
    results = _by_check(await check_cli.run_checks(kube.api, namespace=kube.namespace))
    assert {results[c].outcome for c in POD_CHECKS} == {checks.Outcome.PASS}, results
    key = "sk-ant-api03-" + "k" * 40
    bearer = provider.env("MY_VAR", f"Bearer {key}").manifests(scoped, pod_name="claude-code-bearer")[-1]
    await kube.api.create(api.PODS, kube.namespace, bearer)
    results = _by_check(await check_cli.run_checks(kube.api, namespace=kube.namespace))
    secrets = results["secrets by reference"]
    assert secrets.outcome is checks.Outcome.FAIL
    assert "claude-code-bearer/" in secrets.why
    assert "MY_VAR holds a Claude key" in secrets.why
    assert key not in json.dumps([r.why for r in results.values()])


async def test_only_agent_pods_are_checked_unless_a_pod_is_named(kube: Any, make_pod: Any) -> None:
    await kube.api.create(api.PODS, kube.namespace, make_pod("unrelated"))
    results = await check_cli.run_checks(kube.api, namespace=kube.namespace)
    assert _by_check(results)["security context"].why.startswith("no agent pod")
    named = await check_cli.run_checks(kube.api, namespace=kube.namespace, pod="unrelated")
    assert _by_check(named)["security context"].outcome is checks.Outcome.FAIL
    assert "unrelated/main" in _by_check(named)["security context"].why


async def test_the_real_auth_proxy_refuses_an_unknown_token(kube: Any) -> None:
    config = proxy_config.AuthProxyConfig(admin_key=Secret("a" * 40), upstream="http://127.0.0.1:9")
    async with proxy_app.run_auth_proxy(config) as running:
        results = await check_cli.run_checks(kube.api, namespace=kube.namespace, auth_proxy_url=running.url)
    proxy = _by_check(results)["auth proxy refuses an unknown token"]
    assert proxy.outcome is checks.Outcome.PASS, proxy.why


async def _accept_anything(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def test_a_proxy_that_lets_an_unknown_token_through_fails(kube: Any) -> None:
    app = web.Application()
    app.router.add_get("/v1/messages", _accept_anything)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        results = await check_cli.run_checks(
            kube.api, namespace=kube.namespace, auth_proxy_url=f"http://127.0.0.1:{port}"
        )
    finally:
        await runner.cleanup()
    proxy = _by_check(results)["auth proxy refuses an unknown token"]
    assert proxy.outcome is checks.Outcome.FAIL
    assert "HTTP 200" in proxy.why


async def test_an_unreachable_proxy_fails(kube: Any) -> None:
    results = await check_cli.run_checks(
        kube.api, namespace=kube.namespace, auth_proxy_url="http://127.0.0.1:9", proxy_timeout_s=2
    )
    assert _by_check(results)["auth proxy refuses an unknown token"].outcome is checks.Outcome.FAIL


# Only this topic's command, in a child process, so the parent's loop keeps serving the API.
_PROGRAM = (
    "from ironflow.cli import check; import typer; app = typer.Typer(); app.callback()(lambda: None); "
    "check.register(app); app()"
)


async def _command(server: Any, tmp_path: Path, *args: str) -> tuple[int | None, str, str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(server.kubeconfig_yaml())
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PROGRAM,
        "check",
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode, out.decode(), err.decode()


async def test_the_command_prints_the_table_and_exits_3(kube: Any, tmp_path: Path) -> None:
    _deny_networkpolicies(kube)
    await kube.api.create(api.PODS, kube.namespace, _pod(kube.namespace, "claude-code-good"))
    code, out, err = await _command(kube.need_server(), tmp_path, "-n", kube.namespace, "-o", "json")
    assert code == 3, err
    rows = {row["check"]: row["result"] for row in json.loads(out)}
    assert rows["security context"] == "pass"
    assert rows["root filesystem read-only (exec)"] == "skipped"


async def test_a_missing_pod_is_bad_input(kube: Any, tmp_path: Path) -> None:
    code, _, err = await _command(kube.need_server(), tmp_path, "-n", kube.namespace, "--pod", "nope")
    assert code == 2
    assert err.strip() == f"error: pod 'nope' not found in namespace {kube.namespace}"


async def test_a_namespace_that_does_not_exist_is_bad_input(kube: Any, tmp_path: Path) -> None:
    """A list in a missing namespace answers empty: without this the check would look at nothing."""
    code, out, err = await _command(kube.need_server(), tmp_path, "-n", "no-such-namespace")
    assert code == 2
    assert out == ""
    assert err.strip() == "error: namespace 'no-such-namespace' does not exist in this cluster"


async def test_nothing_to_inspect_exits_3_not_1(kube: Any, tmp_path: Path) -> None:
    """No agent pod in the namespace: nothing failed, the pod checks could not run (exit 3)."""
    _deny_networkpolicies(kube)
    code, out, err = await _command(kube.need_server(), tmp_path, "-n", kube.namespace, "-o", "json")
    assert code == 3, err
    rows = {row["check"]: row for row in json.loads(out)}
    for name in POD_CHECKS:
        assert rows[name]["result"] == "skipped"
        assert rows[name]["why"].startswith("no agent pod to inspect")
    assert "fail" not in {row["result"] for row in rows.values()}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(["-n", "Bad"], "invalid namespace 'Bad'"), (["--auth-proxy", "proxy:8080"], "must start with http://")],
)
def test_bad_options_exit_2(args: list[str], fragment: str) -> None:
    import typer
    from typer.testing import CliRunner

    app = typer.Typer()
    app.callback()(lambda: None)
    check_cli.register(app)
    result = CliRunner().invoke(app, ["check", *args])
    assert result.exit_code == 2
    assert fragment in result.stderr


class _ReviewServer:
    """A strict loopback stand-in for the one API call the test server lacks: it answers a
    SubjectAccessReview for the worker creating NetworkPolicies, and 404 to anything else."""

    def __init__(self, *, allowed: bool | None, status: int = 201) -> None:
        self.allowed = allowed
        self.status = status
        self.bodies: list[dict[str, Any]] = []

    async def review(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        if self.status != 201:
            return web.json_response({"kind": "Status", "code": self.status, "reason": "Forbidden"}, status=self.status)
        return web.json_response({**body, "status": {"allowed": self.allowed}}, status=201)

    async def pods(self, _: web.Request) -> web.Response:
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []})


async def _review_results(allowed: bool | None, status: int = 201) -> tuple[list[checks.CheckResult], _ReviewServer]:
    fake = _ReviewServer(allowed=allowed, status=status)
    app = web.Application()
    app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", fake.review)
    app.router.add_get("/api/v1/namespaces/agents/pods", fake.pods)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    kubeconfig = (
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:"
        f"{port}\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n"
        "    user: u\ncurrent-context: x\n"
    )
    try:
        kube_api = await api.KubeApi.connect(api.KubeconfigInline(kubeconfig))
        async with kube_api:
            results = await check_cli.run_checks(kube_api, namespace="agents", worker_namespace="wk")
    finally:
        await runner.cleanup()
    return results, fake


@pytest.mark.parametrize(
    ("allowed", "status", "outcome"),
    [(False, 201, checks.Outcome.PASS), (True, 201, checks.Outcome.FAIL), (None, 403, checks.Outcome.SKIPPED)],
)
async def test_networkpolicy_check_follows_the_api_servers_review(
    allowed: bool | None, status: int, outcome: checks.Outcome
) -> None:
    results, fake = await _review_results(allowed, status)
    assert fake.bodies[0]["spec"]["user"] == "system:serviceaccount:wk:ironflow-worker"
    assert fake.bodies[0]["spec"]["resourceAttributes"]["resource"] == "networkpolicies"
    result = _by_check(results)["worker cannot create networkpolicies"]
    assert result.outcome is outcome, result.why
