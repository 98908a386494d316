"""A git workspace's pod as data: the clone init container (hardened, its token alone), the
main container in /workspace with the base read-only and its command wrapped, and the
refusals of what a pod cannot take. Every pod is validated against the real schemas."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from ironflow import AgentConfig, errors, labels
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.cluster import setup
from ironflow.k8s import K8sEphemeralProvider
from ironflow.k8s.commands import pod_runs
from ironflow.k8s.environments import EnvironmentVolume
from ironflow.k8s.workspaces import init_pods, push_pod
from ironflow.secrets import Secret
from ironflow.testing.k8s_validate import validate_manifest, validate_manifests
from ironflow.workspaces import Change, ChangedFile, Workspace, WorkspaceChanges
from ironflow.workspaces.git_script import clone_commands

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
NOW = 1_700_000_000
PROXY = "http://auth-proxy.ironflow:8080"
STEP_TOKEN = "ifap_" + "a" * 64
GIT_TOKEN = "ifap_" + "b" * 64
HOST_TOKEN = "ghs_the_real_git_host_token"
SPEC = Workspace("https://github.com/org/repo.git", ref="main")


def provider(**changes: Any) -> K8sEphemeralProvider:
    hosts = GitHosts({"github.com": GitCredential(Secret(HOST_TOKEN))})
    return K8sEphemeralProvider.sandboxed(IMAGE).namespace("agents").auth_proxy(PROXY).git_credentials(hosts)


def pod_of(p: K8sEphemeralProvider, config: AgentConfig | None = None) -> dict[str, Any]:
    objs = p.manifests(
        config or AgentConfig("fix it", workspace=SPEC),
        now=NOW,
        pod_name="claude-code-test-00000001",
        proxy_token=STEP_TOKEN,
        workspace_token=GIT_TOKEN,
    )
    validate_manifests(objs)
    return objs[-1]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_the_clone_runs_first_hardened_as_the_agent_with_the_git_grant_only() -> None:
    spec = pod_of(provider())["spec"]
    clone, *others = spec["initContainers"]
    main = spec["containers"][0]
    assert clone["name"] == init_pods.CLONE_CONTAINER_NAME
    assert clone["image"] == IMAGE
    assert others == []
    assert clone["securityContext"] == main["securityContext"]
    assert clone["securityContext"]["readOnlyRootFilesystem"] is True
    assert clone["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert clone["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    script = clone["command"][-1]
    assert "git clone --quiet --branch main -- http://auth-proxy.ironflow:8080/r/github.com/org/repo.git" in script
    env = env_of(clone)
    assert env["GIT_CONFIG_VALUE_0"] == f"Authorization: Bearer {GIT_TOKEN}"
    assert env["GIT_ALLOW_PROTOCOL"] == "http"
    assert STEP_TOKEN not in str(clone)
    assert GIT_TOKEN not in str(main)  # the step never holds the token that reaches the git host
    assert HOST_TOKEN not in str(spec)  # the host's own token is the proxy's only


def test_the_agent_works_in_the_clone_with_the_base_read_only_and_its_command_wrapped() -> None:
    main = pod_of(provider())["spec"]["containers"][0]
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    assert mounts["/workspace"]["name"] == "ironflow-workspace"
    assert "readOnly" not in mounts["/workspace"]
    assert mounts[init_pods.BASE_PATH]["readOnly"] is True
    assert main["workingDir"] == "/workspace"
    volumes = {v["name"]: v for v in pod_of(provider())["spec"]["volumes"]}
    limit = str(SPEC.max_total_bytes)  # a step cannot fill the node's disk through its workspace
    assert volumes["ironflow-workspace"] == {"name": "ironflow-workspace", "emptyDir": {"sizeLimit": limit}}
    assert volumes["ironflow-workspace-base"]["emptyDir"] == {"sizeLimit": limit}
    script = main["command"][-1]
    assert "cd '/workspace' && " in script
    assert script.index("claude") < script.index("\nironflow_report\n")
    assert script.rstrip().endswith('exit "$ironflow_code"')


def test_without_a_workspace_the_pod_is_as_before() -> None:
    pod = pod_of(provider(), AgentConfig("hello"))
    assert "initContainers" not in pod["spec"]
    assert "ironflow_report" not in pod["spec"]["containers"][0]["command"][-1]


def test_an_exec_pod_gets_the_same_workspace() -> None:
    run = pod_runs.exec_pod_run(provider().settings, ["make", "fmt"], timeout_s=60, now_ms=NOW * 1000, rand32=1)
    invocation = clone_commands(PROXY, SPEC.source, GIT_TOKEN, directory="/workspace", ref=SPEC.ref)
    pod = init_pods.add_git_workspace(run.build_pod(now=NOW), SPEC, invocation)
    validate_manifest(pod)
    main, clone = pod["spec"]["containers"][0], pod["spec"]["initContainers"][0]
    assert clone["securityContext"] == main["securityContext"]
    assert clone["securityContext"]["runAsUser"] == 10001
    assert main["workingDir"] == "/workspace"
    assert main["command"][:2] == ["/bin/sh", "-c"]
    assert main["command"][-1].count("( make fmt\n)") == 1


def test_an_exec_pod_with_a_read_only_root_gets_a_writable_tmp_for_the_report() -> None:
    """The report's ``mktemp -d`` needs /tmp: a sandboxed exec pod has a read-only root and no
    /tmp of its own (on the real node its report failed); an agent pod's own /tmp is kept."""
    pod = _exec_workspace_pod()
    main = pod["spec"]["containers"][0]
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    (tmp,) = [m for m in main["volumeMounts"] if m["mountPath"] == "/tmp"]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == tmp["name"]]
    assert "emptyDir" in volume
    agent = pod_of(provider())
    assert [m["name"] for m in agent["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] == "/tmp"] == [
        "ironflow-tmp"
    ]


def test_an_unhardened_pods_clone_is_hardened_all_the_same() -> None:
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": IMAGE, "command": ["sh", "-c", "true"]}]}}  # fmt: skip
    invocation = clone_commands(PROXY, SPEC.source, GIT_TOKEN, directory="/workspace")
    out = init_pods.add_git_workspace(pod, SPEC, invocation)
    validate_manifest(out)
    context = out["spec"]["initContainers"][0]["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert "securityContext" not in pod["spec"]["containers"][0]  # the input is left as it was


def test_the_patch_limit_is_the_workspaces_within_the_logs() -> None:
    assert init_pods.patch_limit(SPEC) == init_pods.POD_PATCH_LIMIT
    assert init_pods.patch_limit(Workspace(SPEC.source, max_total_bytes=10)) == 10


def test_a_pod_refuses_a_host_directory() -> None:
    config = AgentConfig("x", workspace=Workspace("/repo"))
    with pytest.raises(errors.StepConfigError, match="a pod cannot see the worker's directory"):
        provider().manifests(config, now=NOW, proxy_token=STEP_TOKEN, workspace_token=GIT_TOKEN)


def test_the_push_pod_clones_applies_to_the_index_and_pushes_a_new_branch_hardened() -> None:
    spec = Workspace(SPEC.source, ref="main", push_branch="ironflow/fix-1")
    changes = WorkspaceChanges(b"diff --git a/x b/x\n\x00binary", (ChangedFile("x", Change.MODIFIED, None, None),))
    scope = {labels.LABEL_RUN_ID: "run-1", labels.LABEL_STEP: "fix", "team": "infra"}
    configmap, pod = push_pod.push_objects(
        provider().settings, spec, changes, token=GIT_TOKEN, message="ironflow fix: it", pod_labels=scope,
        now=NOW, rand32=3,
    )  # fmt: skip
    validate_manifests([configmap, pod])
    assert base64.b64decode(configmap["binaryData"]["patch"]) == changes.patch
    assert configmap["metadata"]["labels"][labels.LABEL_COMPONENT] == labels.COMPONENT_PROMPT_DATA
    assert configmap["metadata"]["labels"][labels.LABEL_RUN_ID] == "run-1"
    assert pod["metadata"]["name"].startswith("ironflow-push-")
    assert pod["metadata"]["labels"][labels.LABEL_STEP] == "fix"
    main = pod["spec"]["containers"][0]
    script = main["command"][-1]
    assert script.index("git clone") < script.index("apply --cached --binary") < script.index("commit")
    assert "--force-with-lease=refs/heads/ironflow/fix-1: -- " in script
    assert "core.hooksPath=/dev/null" in script
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert HOST_TOKEN not in str(pod)


def _push_pod() -> dict[str, Any]:
    spec = Workspace(SPEC.source, ref="main", push_branch="ironflow/fix-1")
    changes = WorkspaceChanges(b"diff", (ChangedFile("x", Change.MODIFIED, None, None),))
    scope = {labels.LABEL_RUN_ID: "run-1", labels.LABEL_STEP: "fix"}
    _, pod = push_pod.push_objects(provider().settings, spec, changes, token=GIT_TOKEN, message="m",
                                   pod_labels=scope, now=NOW, rand32=3)  # fmt: skip
    return pod


def _exec_workspace_pod() -> dict[str, Any]:
    run = pod_runs.exec_pod_run(provider().settings, ["make", "fmt"], timeout_s=60, now_ms=NOW * 1000, rand32=1)
    invocation = clone_commands(PROXY, SPEC.source, GIT_TOKEN, directory="/workspace", ref=SPEC.ref)
    return init_pods.add_git_workspace(run.build_pod(now=NOW), SPEC, invocation)


def _exec_egress_pod() -> dict[str, Any]:
    """An ``exec`` pod with an egress policy (``egress_runs.with_egress`` makes its run a proxy client)."""
    run = pod_runs.exec_pod_run(provider().settings, ["pip", "download"], timeout_s=60, now_ms=NOW * 1000, rand32=1)
    return run.proxy_client().env("HTTPS_PROXY", "http://ironflow:t@proxy:3128").build_pod(now=NOW)


@pytest.mark.parametrize(
    "make", [_push_pod, _exec_workspace_pod, _exec_egress_pod], ids=["push", "exec-workspace", "exec-egress"]
)
def test_a_pod_that_clones_through_the_proxy_is_one_the_rendered_network_policies_let_reach_it(
    make: Callable[[], dict[str, Any]],
) -> None:
    """The push pod and an ``exec`` pod on a git workspace clone (and push) through the proxy: under
    ``ironflow manifests``' NetworkPolicies (default deny; DNS and the proxy for agent pods, the
    proxy admitting agent pods) each must be an agent pod. Both were ``pod-run`` pods at first."""
    config = setup.ClusterSetup(namespace="ironflow-agents", auth_proxy_url=PROXY, presets=(), egress_profiles=())
    policies = [d for d in setup.render(config) if d["kind"] == "NetworkPolicy"]
    pod = make()
    validate_manifest(pod)
    pod_labels = pod["metadata"]["labels"]
    selected = {p["metadata"]["name"] for p in policies
                if p["spec"]["podSelector"].get("matchLabels", {}).items() <= pod_labels.items()}  # fmt: skip
    assert selected >= {"claude-runner-egress-dns", "claude-runner-egress-auth-proxy"}, pod_labels
    (proxy_policy,) = [p for p in policies if p["metadata"]["name"] == "ironflow-auth-proxy"]
    peers = proxy_policy["spec"]["ingress"][0]["from"]
    assert any(peer["podSelector"]["matchLabels"].items() <= pod_labels.items() for peer in peers), pod_labels


def test_an_exec_pod_without_a_workspace_stays_a_pod_run_with_no_network() -> None:
    """Only a pod that clones is made a proxy client: a plain ``exec`` pod gets no egress at all."""
    run = pod_runs.exec_pod_run(provider().settings, ["true"], timeout_s=60, now_ms=NOW * 1000, rand32=1)
    assert run.build_pod(now=NOW)["metadata"]["labels"][labels.LABEL_COMPONENT] == labels.COMPONENT_POD_RUN


def test_a_patch_too_large_for_a_configmap_is_refused() -> None:
    spec = Workspace(SPEC.source, push_branch="fix")
    big = WorkspaceChanges(b"x" * (push_pod.PUSH_PATCH_LIMIT + 1), (ChangedFile("x", Change.ADDED, None, None),))
    with pytest.raises(errors.WorkspaceRefused, match="take it with --patch and push it yourself"):
        push_pod.push_objects(provider().settings, spec, big, token=GIT_TOKEN, message="m", pod_labels={},
                               now=NOW, rand32=1)  # fmt: skip


def test_a_git_workspace_needs_an_auth_proxy_and_the_hosts_credential() -> None:
    bare = K8sEphemeralProvider.sandboxed(IMAGE)
    with pytest.raises(errors.StepConfigError, match="needs auth_proxy"):
        bare.manifests(AgentConfig("x", workspace=SPEC), now=NOW)
    other = Workspace("https://gitlab.com/org/repo.git")
    with pytest.raises(errors.WorkspaceRefused, match=r"no git credential for 'gitlab\.com'"):
        provider().manifests(AgentConfig("x", workspace=other), now=NOW, proxy_token=STEP_TOKEN)
    with pytest.raises(errors.ConfigError, match="workspace_token"):
        provider().manifests(AgentConfig("x", workspace=SPEC), now=NOW, proxy_token=STEP_TOKEN)


def test_a_volume_at_the_workspace_is_refused() -> None:
    p = provider().environment_volume(EnvironmentVolume("/workspace"))
    with pytest.raises(errors.StepConfigError, match="the volume mount at '/workspace' is in its way"):
        pod_of(p)


def test_a_git_upstream_mirror_is_refused_on_kubernetes() -> None:
    with pytest.raises(errors.ConfigError, match="IRONFLOW_GIT_UPSTREAM"):
        K8sEphemeralProvider(IMAGE).git_credentials(GitHosts(upstream="http://127.0.0.1:1"))


def test_the_provider_repr_holds_no_git_token() -> None:
    assert HOST_TOKEN not in repr(provider())
    assert HOST_TOKEN not in repr(provider().settings)


def test_a_pvc_workspace_mounts_the_claim_writable_for_the_step_and_read_only_for_the_base() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).namespace("agents")  # no proxy, no git credential needed
    objs = p.manifests(AgentConfig("fix", workspace=Workspace("pvc:sources/team/repo")), now=NOW)
    validate_manifests(objs)
    spec = objs[-1]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "ironflow-workspace")
    assert volume == {"name": "ironflow-workspace", "persistentVolumeClaim": {"claimName": "sources"}}
    main, init = spec["containers"][0], spec["initContainers"][0]
    step_mount = next(m for m in main["volumeMounts"] if m["mountPath"] == "/workspace")
    assert step_mount == {"name": "ironflow-workspace", "mountPath": "/workspace", "subPath": "team/repo"}
    init_mount = next(m for m in init["volumeMounts"] if m["mountPath"] == "/workspace")
    assert init_mount["readOnly"] is True
    assert init["securityContext"] == main["securityContext"]
    assert "git clone" not in init["command"][-1]
    assert "ironflow_report" in main["command"][-1]


@pytest.mark.parametrize("source", ["pvc:Bad", "pvc:ok/../up", "pvc:"])
def test_a_bad_pvc_source_is_refused(source: str) -> None:
    with pytest.raises(errors.ConfigError, match="invalid pvc workspace"):
        Workspace(source)
