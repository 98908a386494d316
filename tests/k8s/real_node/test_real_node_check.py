"""On a real node: ``ironflow check`` (the CLI, as an operator runs it: ``$KUBECONFIG``, ``-n``,
``--auth-proxy``, ``-o json``) against a live agent pod passes every seed check, and fails the rows
it should for a pod that breaks them. It runs as the account ``ironflow manifests`` renders for it
(``ironflow-check``: its ServiceAccount, Role and ClusterRole, a token from the TokenRequest API),
never as the cluster's admin, so a permission the rendered RBAC lacks fails a row here.

The agent pod is the one ``K8sEphemeralProvider`` renders for a step through the auth proxy (its
security context, labels, expiry, proxy URL and ``ifap_`` token), only its command kept running
(``sleep``), in a namespace enforcing Pod Security ``restricted``, under the NetworkPolicies
``ironflow manifests`` renders, with the worker's rendered RBAC, and the proxy deployed from its built
image behind its Service. So the exec probes run in a real container: the 401 comes from the proxy
answering the pod by its Service name, the read-only root is the kubelet's mount.

The failing pod is that same pod with what Pod Security ``restricted`` still admits but ironflow
never renders: a writable root, the service-account token mounted, and no proxy URL. Its spec rows
and its exec rows fail (exit 1) while the rows it does not break still pass, so a check that stops
looking, or a probe that stops running in the pod, fails this test. Skipped when the node's
binaries or the runner and auth-proxy images are missing.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Final

import pytest
from tests.fakes import real_node_proxy as rp

from ironflow.cluster import setup
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(600)  # the node's start (images loaded) counts in the first test

ROOT: Final = Path(__file__).resolve().parents[3]
#: The seed's rows with the auth proxy, in table order (``ironflow.cluster.checks``).
SEED_CHECKS: Final = (
    "security context",
    "secrets by reference",
    "no service-account token",
    "run/root/step labels and expiry",
    "no Claude credential in the pod",
    "worker cannot create networkpolicies",
    "auth proxy refuses an unknown token",
    "SA token directory absent (exec)",
    "root filesystem read-only (exec)",
    "egress limited to the profile (exec)",
    "no sk-ant in the pod env (exec)",
    "proxy refuses an unknown token from the pod (exec)",
)
#: What the broken pod must fail; every other row still passes for it.
BROKEN: Final = frozenset(
    {
        "security context",
        "no service-account token",
        "SA token directory absent (exec)",
        "root filesystem read-only (exec)",
        "proxy refuses an unknown token from the pod (exec)",
    }
)
#: The pod's own view of the proxy: curl (in the runner image) to its ANTHROPIC_BASE_URL.
_REACHES_PROXY: Final = 'curl -s -o /dev/null -w "%{http_code}" -m 3 "$ANTHROPIC_BASE_URL/healthz" || true'


def _agent_pod(image: str, namespace: str, proxy_url: str, name: str) -> dict[str, Any]:
    """The pod the provider renders for a proxied step, its command replaced by a long sleep."""
    provider = K8sEphemeralProvider.sandboxed(image).namespace(namespace).auth_proxy(proxy_url)
    token = "ifap_" + uuid.uuid4().hex  # never issued: the pod only has to hold a proxy token's shape
    objects = provider.manifests(AgentConfig("check me").scoped(f"run-{name}", "check"), proxy_token=token)
    (pod,) = [o for o in objects if o["kind"] == "Pod"]
    pod["metadata"]["name"] = name
    (container,) = pod["spec"]["containers"]
    container["command"] = ["sleep", "3600"]
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    return pod


def _broken(pod: dict[str, Any], name: str) -> dict[str, Any]:
    """What ``restricted`` admits and ironflow never renders: writable root, the API token, no proxy URL."""
    bad = copy.deepcopy(pod)
    bad["metadata"]["name"] = name
    (container,) = bad["spec"]["containers"]
    container["securityContext"]["readOnlyRootFilesystem"] = False
    container["env"] = [e for e in container["env"] if e["name"] != "ANTHROPIC_BASE_URL"]
    bad["spec"]["automountServiceAccountToken"] = True
    return bad


def _check_kubeconfig(env: RealNodeEnv, config: setup.ClusterSetup, path: Path) -> Path:
    """A kubeconfig of the rendered ``ironflow-check`` account (a TokenRequest token), written at ``path``."""
    token = env.service_account_token(config.worker_namespace, setup.CHECK_SERVICE_ACCOUNT, seconds=900)
    path.write_text(env.token_config(token).yaml)
    path.chmod(0o600)
    return path


def _check(kubeconfig: Path, config: setup.ClusterSetup, proxy_url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    """``ironflow check -n <agents> --auth-proxy <url> -o json``: its exit code and rows by name."""
    args = ["check", "-n", config.namespace, "--worker-namespace", config.worker_namespace]
    args += ["--auth-proxy", proxy_url, "-o", "json", *extra]
    run_env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(ROOT / "src")}
    main = "from ironflow.cli.app import main; main()"
    done = subprocess.run([sys.executable, "-c", main, *args], env=run_env, capture_output=True, text=True, timeout=120)
    assert done.stdout.lstrip().startswith("["), f"exit {done.returncode}: {done.stdout}{done.stderr[-2000:]}"
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    return done.returncode, rows


async def _reaches_proxy(api: k8s.KubeApi, namespace: str, pod: str) -> None:
    """The new pod reaches the proxy (kube-router may drop a pod's first packets while it syncs)."""
    seen: list[str] = []

    async def answered() -> bool:
        done = await api.exec(namespace, pod, ("sh", "-c", _REACHES_PROXY))
        seen.append(done.stdout.decode().strip())
        return seen[-1] == "200"

    await eventually(answered, limit_s=30, interval_s=0.5, what=lambda: f"{pod} reaching the proxy: {seen}")


async def test_ironflow_check_passes_a_live_agent_pod_and_fails_a_broken_one(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], tmp_path: Path
) -> None:
    runner = need_image["runner"]
    need_image["auth-proxy"]
    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    config = dataclasses.replace(config, check_rbac=True)
    rendered = setup.render(config)
    rbac = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    with rp.cluster_namespaces(real_node, config):
        real_node.apply_objects([d for d in rendered if d["kind"] in rbac])
        kubeconfig = _check_kubeconfig(real_node, config, tmp_path / "check.kubeconfig")
        proxy = rp.deploy_auth_proxy(real_node, config, admin_key=rp.new_admin_key())
        rp.enforce_policies(real_node, rp.network_policies(config))
        good = _agent_pod(runner, config.namespace, proxy.url, f"agent-{suffix}")
        await rp.start_pods(node_api, [good])
        await _reaches_proxy(node_api, config.namespace, good["metadata"]["name"])

        with rp.forward_into_node(real_node, proxy.cluster_ip, 80) as proxy_url:
            code, rows = await asyncio.to_thread(_check, kubeconfig, config, proxy_url)
            assert tuple(rows) == SEED_CHECKS, rows
            assert {name: row["result"] for name, row in rows.items() if row["result"] != "pass"} == {}, rows
            assert code == 0
            assert rows["proxy refuses an unknown token from the pod (exec)"]["why"].startswith("1 pod(s)"), rows

            bad = _broken(good, f"broken-{suffix}")
            await rp.start_pods(node_api, [bad])
            bad_name = bad["metadata"]["name"]
            code, rows = await asyncio.to_thread(_check, kubeconfig, config, proxy_url, "--pod", bad_name)
        failed = {name for name, row in rows.items() if row["result"] == "fail"}
        assert failed == BROKEN, rows
        assert {row["result"] for name, row in rows.items() if name not in BROKEN} == {"pass"}, rows
        assert code == 1
        why = {name: row["why"] for name, row in rows.items()}
        assert "root filesystem is writable" in why["security context"]
        assert "/ is mounted read-write" in why["root filesystem read-only (exec)"]  # the kubelet's mount, seen inside
        assert "exists" in why["SA token directory absent (exec)"]
        assert "no ANTHROPIC_BASE_URL" in why["proxy refuses an unknown token from the pod (exec)"]
