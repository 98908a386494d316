"""On a real kube-apiserver (server-side dry run): every object ``ironflow manifests`` renders with
every optional part, the Deployments included, is accepted, and the pods of both Deployments pass
admission (PodSecurity ``restricted`` in the proxy's namespace); so are the set for a proxy outside
the cluster (an ipBlock policy on the URL's port) and the agent pod the worker's provider renders,
with its default requests and limits. Skipped when the control-plane binaries are not built."""

from __future__ import annotations

import uuid

import pytest
from tests.fakes.server_dry_run import dry_run_set

from ironflow import AgentConfig
from ironflow.cluster import network, setup, workloads
from ironflow.k8s import K8sEphemeralProvider, K8sResources
from ironflow.testing.kubeenv import KubeEnv, KubeEnvError


def test_the_full_rendered_set_is_accepted_by_the_real_apiserver(kube_env: KubeEnv) -> None:
    tag = uuid.uuid4().hex[:8]
    config = setup.ClusterSetup(
        namespace=f"dry-agents-{tag}",
        worker_namespace=f"dry-worker-{tag}",
        auth_proxy_url=f"http://ironflow-auth-proxy.dry-proxy-{tag}:8081",
        gvisor=True,
        environment_claims=True,
        session_volumes=True,
        check_rbac=True,
        agent_sandbox_rbac=True,
        auth_proxy_deployment=workloads.AuthProxyDeployment(),
        worker_deployment=workloads.WorkerDeployment(),
    )
    objects = setup.render(config)
    with dry_run_set(kube_env, objects) as answers:
        sent = [o for o in objects if o["kind"] not in {"Namespace", "ServiceAccount"}]
        assert [(a["kind"], a["metadata"]["name"]) for a in answers[: len(sent)]] == [
            (o["kind"], o["metadata"]["name"]) for o in sent
        ]
        pods = {a["metadata"]["name"]: a for a in answers[len(sent) :]}
    assert set(pods) == {f"{network.AUTH_PROXY_NAME}-dry-run", f"{network.WORKER_POD_NAME}-dry-run"}
    for pod in pods.values():  # admitted and defaulted by the server, not just echoed back
        assert pod["spec"]["restartPolicy"] == "Always"
        assert pod["spec"]["enableServiceLinks"] is False
    deployment = next(a for a in answers if a["kind"] == "Deployment")
    assert deployment["spec"]["revisionHistoryLimit"] == 10  # a server default


def test_realkube_the_dry_run_judges_the_pods_a_root_proxy_pod_is_refused(kube_env: KubeEnv) -> None:
    """The dry run is not a rubber stamp: the same set with the proxy's pod allowed to run as root
    is refused by PodSecurity ``restricted`` in the proxy's namespace."""
    tag = uuid.uuid4().hex[:8]
    config = setup.ClusterSetup(
        namespace=f"dry-agents-{tag}",
        worker_namespace=f"dry-worker-{tag}",
        auth_proxy_url=f"http://ironflow-auth-proxy.dry-proxy-{tag}",
        auth_proxy_deployment=workloads.AuthProxyDeployment(),
    )
    objects = setup.render(config)
    proxy = next(o for o in objects if o["kind"] == "Deployment")
    proxy["spec"]["template"]["spec"]["securityContext"].update(runAsNonRoot=False, runAsUser=0)
    with pytest.raises(KubeEnvError, match="violates PodSecurity"), dry_run_set(kube_env, objects):
        pass


def test_realkube_an_ip_proxy_set_and_the_agent_pod_with_its_limits_are_accepted(kube_env: KubeEnv) -> None:
    """The new fields as the server sees them: an ipBlock /32 egress on the URL's port, and an agent
    pod with cpu, memory and ephemeral-storage requests and limits and no service links, admitted
    by PodSecurity ``restricted`` in the agent namespace and kept as sent."""
    tag = uuid.uuid4().hex[:8]
    config = setup.ClusterSetup(
        namespace=f"dry-agents-{tag}",
        worker_namespace=f"dry-worker-{tag}",
        auth_proxy_url="http://10.0.0.5:8443",
        worker_deployment=workloads.WorkerDeployment(),
    )
    provider = K8sEphemeralProvider.sandboxed(workloads.DEFAULT_RUNNER_IMAGE).namespace(config.namespace)
    agent_pod = provider.manifests(AgentConfig("hello"), pod_name=f"claude-code-dry-{tag}")[-1]
    with dry_run_set(kube_env, [*setup.render(config), agent_pod]) as answers:
        by_name = {(a["kind"], a["metadata"]["name"]): a for a in answers}
    policy = by_name[("NetworkPolicy", "claude-runner-egress-auth-proxy")]
    assert policy["spec"]["egress"] == [
        {
            "to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}],
            "ports": [{"port": 8443, "protocol": "TCP"}, {"port": network.EGRESS_PORT, "protocol": "TCP"}],
        }
    ]
    pod = by_name[("Pod", f"claude-code-dry-{tag}")]
    assert pod["spec"]["enableServiceLinks"] is False
    assert pod["spec"]["containers"][0]["resources"] == K8sResources().render()
    assert pod["status"]["qosClass"] == "Burstable"  # computed by the server from requests and limits
