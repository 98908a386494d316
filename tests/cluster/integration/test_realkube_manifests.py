"""On a real kube-apiserver (server-side dry run): every object ``ironflow manifests`` renders with
every optional part, the Deployments included, is accepted, and the pods of both Deployments pass
admission (PodSecurity ``restricted`` in the proxy's namespace). Skipped when the control-plane
binaries are not built."""

from __future__ import annotations

import uuid

import pytest
from tests.fakes.server_dry_run import dry_run_set

from ironflow.cluster import network, setup, workloads
from ironflow.testing.kubeenv import KubeEnv, KubeEnvError


def test_the_full_rendered_set_is_accepted_by_the_real_apiserver(kube_env: KubeEnv) -> None:
    tag = uuid.uuid4().hex[:8]
    config = setup.ClusterSetup(
        namespace=f"dry-agents-{tag}",
        worker_namespace=f"dry-worker-{tag}",
        auth_proxy_url=f"http://ironflow-auth-proxy.dry-proxy-{tag}:8081",
        gvisor=True,
        environment_claims=True,
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
