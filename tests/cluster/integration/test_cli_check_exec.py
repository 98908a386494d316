"""``ironflow check``'s exec probes through ``KubeApi.exec`` and the test server's pods/exec,
with real bubblewrap standing in for the container runtime: the sandbox is built from the
stored pod (read-only root unless ``readOnlyRootFilesystem`` is not true, a service-account
token directory unless ``automountServiceAccountToken: false``, no network when an Egress
NetworkPolicy selects the pod, env from the spec with ``secretKeyRef`` resolved from the
stored Secret, as a kubelet would). A sound proxied pod passes every exec probe; each
broken pod state fails exactly its probe."""

from __future__ import annotations

import asyncio
import base64
import copy
import itertools
import json
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from ironflow import labels
from ironflow.cli import check as check_cli
from ironflow.cluster import checks
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api
from ironflow.secrets import find_leaks
from ironflow.steps import AgentConfig
from ironflow.testing.kube import ExecRunner, KubeTestServer

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

NS = "agents"
IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
STEP = AgentConfig("review").scoped("run-1", "review").pod_label(labels.LABEL_ROOT_RUN_ID, "run-1")
NETWORK_POLICIES = api.custom_resource(
    "networking.k8s.io", "v1", "networkpolicies", kind="NetworkPolicy", namespaced=True
)
SECRETS = api.Resource("", "v1", "secrets", "Secret")
SECRET_VALUE = "sk-ant-oat01-" + "Q" * 40
EXEC_ROWS = {p.name for p in checks.EXEC_PROBES}
#: The pods the namespace's egress policy selects (sound pods carry it).
ISOLATED = {"example.com/egress": "isolated"}
_dirs = itertools.count()
# Only this topic's command, in a child process, so this loop keeps serving the API.
_PROGRAM = (
    "from ironflow.cli import check; import typer; app = typer.Typer(); app.callback()(lambda: None); "
    "check.register(app); app()"
)


def _egress_isolated(server: KubeTestServer, pod: dict[str, Any]) -> bool:
    pod_labels = pod["metadata"].get("labels") or {}
    for policy in server.objects(NETWORK_POLICIES, pod["metadata"]["namespace"]):
        selector = policy["spec"].get("podSelector", {}).get("matchLabels") or {}
        if "Egress" in policy["spec"].get("policyTypes", []) and selector.items() <= pod_labels.items():
            return True
    return False


def _env_value(server: KubeTestServer, namespace: str, entry: dict[str, Any]) -> str | None:
    if "value" in entry:
        return str(entry["value"])
    ref = entry.get("valueFrom", {}).get("secretKeyRef")
    if ref is None:
        return None
    secret = server.get_object(SECRETS, namespace, ref["name"]) or {}
    return base64.b64decode(secret.get("data", {}).get(ref["key"], "")).decode()


def bwrap_runtime(server: KubeTestServer, scratch: Path, proxy_url: str = "") -> ExecRunner:
    """The container runtime: each exec runs in a bwrap sandbox shaped by the stored pod. An
    isolated pod has no network, but for the one command that only talks to its proxy (the
    policy admits the proxy): then the pod's proxy address is the loopback stand-in's."""

    async def run(pod: dict[str, Any], container: str, command: list[str]) -> asyncio.subprocess.Process:
        spec = pod["spec"]
        main = next(c for c in spec["containers"] if c["name"] == container)
        args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        args += ["--unshare-pid", "--die-with-parent", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin"]
        if (main.get("securityContext") or {}).get("readOnlyRootFilesystem") is not True:
            writable = scratch / f"usr-local-{next(_dirs)}"
            writable.mkdir()
            args += ["--bind", str(writable), "/usr/local"]
        if spec.get("automountServiceAccountToken") is not False:
            args += ["--tmpfs", "/run", "--dir", checks.SA_TOKEN_DIR.replace("/var/run/", "/run/", 1)]
        to_proxy = proxy_url and command[-1] == checks.probe_command(checks.EXEC_PROBES[-1])[-1]
        if _egress_isolated(server, pod) and not to_proxy:
            args.append("--unshare-net")
        for entry in main.get("env") or []:
            value = _env_value(server, pod["metadata"]["namespace"], entry)
            if value is not None:
                if entry["name"] == "ANTHROPIC_BASE_URL" and proxy_url:
                    value = proxy_url
                args += ["--setenv", entry["name"], value]
        return await asyncio.create_subprocess_exec(
            *args,
            "--",
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )

    return run


def sound_pod(name: str = "claude-code-good") -> dict[str, Any]:
    provider = K8sEphemeralProvider.sandboxed(IMAGE).namespace(NS).auth_proxy("http://proxy:8080")
    pod = provider.manifests(STEP, now=2_000_000_000, proxy_token="ifap_step", pod_name=name)[-1]
    pod["metadata"]["labels"].update(ISOLATED)
    return pod


EGRESS_POLICY = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "agents-egress"},
    "spec": {
        "podSelector": {"matchLabels": ISOLATED},
        "policyTypes": ["Egress"],
    },
}


class Cluster:
    def __init__(self, server: KubeTestServer, kube_api: api.KubeApi, egress_url: str) -> None:
        self.server = server
        self.api = kube_api
        self.egress_url = egress_url

    async def add_running(self, pod: dict[str, Any]) -> None:
        await self.api.create(api.PODS, NS, pod)
        self.server.set_pod_phase(NS, pod["metadata"]["name"], "Running")

    async def results(self, **kwargs: Any) -> dict[str, checks.CheckResult]:
        results = await check_cli.run_checks(
            self.api, namespace=NS, auth_proxy_url=self.egress_url, egress_url=self.egress_url, **kwargs
        )
        return {r.check: r for r in results}


async def _answer(_: web.Request) -> web.Response:
    return web.Response(status=401, text="unknown token")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A test server with the bwrap runtime, the namespace's egress policy, and a loopback
    HTTP server that is both the proxy (401 to an unknown token) and the egress target."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with KubeTestServer(namespaces=("default", NS)) as server:
            server.serve_exec(bwrap_runtime(server, tmp_path, url))
            async with await api.KubeApi.connect(server.cluster_config()) as kube_api:
                await kube_api.create(NETWORK_POLICIES, NS, EGRESS_POLICY)
                server.deny("networkpolicies", "create", NS)  # the worker Role grants no NetworkPolicy
                yield Cluster(server, kube_api, url)
            assert server.running_execs == 0
    finally:
        await runner.cleanup()


async def test_a_sound_pod_passes_every_check_and_the_command_exits_0(cluster: Cluster, tmp_path: Path) -> None:
    """run_checks: every row passes; ``ironflow check`` in a child process prints them and exits 0."""
    await cluster.add_running(sound_pod())
    results = await cluster.results()
    assert {name: results[name].outcome for name in EXEC_ROWS} == dict.fromkeys(EXEC_ROWS, checks.Outcome.PASS)
    assert {r.check: r.outcome for r in results.values()} == dict.fromkeys(results, checks.Outcome.PASS)
    assert len(cluster.server.execs) == 5
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(cluster.server.kubeconfig_yaml())
    args = ["--kubeconfig", str(kubeconfig), "-n", NS, "--auth-proxy", cluster.egress_url]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PROGRAM,
        "check",
        *args,
        "--egress-url",
        cluster.egress_url,
        "-o",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    assert {row["result"] for row in json.loads(out)} == {"pass"}


def _writable_root(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = False


def _token_mounted(pod: dict[str, Any]) -> None:
    pod["spec"]["automountServiceAccountToken"] = True


def _unselected_by_policy(pod: dict[str, Any]) -> None:
    for key in ISOLATED:
        del pod["metadata"]["labels"][key]


def _secret_in_env(pod: dict[str, Any]) -> None:
    ref = {"secretKeyRef": {"name": "leaky", "key": "token"}}
    pod["spec"]["containers"][0]["env"].append({"name": "EXTRA_TOKEN", "valueFrom": ref})


@pytest.mark.parametrize(
    ("breaks", "row", "fragment"),
    [
        (_token_mounted, "SA token directory absent (exec)", "service-account token is mounted"),
        (_writable_root, "root filesystem read-only (exec)", "root filesystem is writable"),
        (_unselected_by_policy, "egress limited to the profile (exec)", "egress is not limited"),
        (_secret_in_env, "no sk-ant in the pod env (exec)", "1 environment variable(s) contain sk-ant"),
    ],
)
async def test_each_broken_pod_state_fails_its_exec_probe(
    cluster: Cluster, breaks: Callable[[dict[str, Any]], None], row: str, fragment: str
) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "leaky"}}
    secret["data"] = {"token": base64.b64encode(SECRET_VALUE.encode()).decode()}
    await cluster.api.create(SECRETS, NS, secret)
    await cluster.add_running(sound_pod("claude-code-good"))
    bad = copy.deepcopy(sound_pod("claude-code-bad"))
    breaks(bad)
    await cluster.add_running(bad)
    results = await cluster.results()
    failed = {name for name in EXEC_ROWS if results[name].outcome is checks.Outcome.FAIL}
    assert failed == {row}
    assert results[row].why == f"claude-code-bad: {results[row].why.split(': ', 1)[1]}"
    assert fragment in results[row].why
    assert find_leaks([SECRET_VALUE], [r.why for r in results.values()]) == []


async def test_no_exec_and_no_running_pod_are_skipped(cluster: Cluster) -> None:
    pod = sound_pod()
    await cluster.api.create(api.PODS, NS, pod)  # Pending: nothing to exec into
    results = await cluster.results()
    assert {results[n].outcome for n in EXEC_ROWS} == {checks.Outcome.SKIPPED}
    assert "no Running agent pod" in results["root filesystem read-only (exec)"].why
    cluster.server.set_pod_phase(NS, pod["metadata"]["name"], "Running")
    results = await cluster.results(exec_probes=False)
    assert {results[n].why for n in EXEC_ROWS} == {"not run (--no-exec)"}
    assert cluster.server.execs == []


async def test_an_account_without_exec_is_skipped_with_the_fix(cluster: Cluster) -> None:
    await cluster.add_running(sound_pod())
    cluster.server.deny("pods/exec", "get")
    results = await cluster.results()
    assert {results[n].outcome for n in EXEC_ROWS} == {checks.Outcome.SKIPPED}
    assert "may not exec" in results["SA token directory absent (exec)"].why
    assert check_cli.exit_code(list(results.values())) == 3


def test_a_malformed_egress_url_is_bad_input() -> None:
    import typer
    from typer.testing import CliRunner

    app = typer.Typer()
    app.callback()(lambda: None)
    check_cli.register(app)
    result = CliRunner().invoke(app, ["check", "--egress-url", "example.com"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: --egress-url 'example.com' must start with http:// or https://"
