"""The provider's cluster selection: the ``cluster_config`` builder, the ``cluster:`` YAML
section (one source plus a context, unknown keys refused by name) and the pure values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ironflow import errors
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api, clusters
from ironflow.kube.clusters import DefaultCluster, InCluster, KubeconfigFile, KubeconfigInline

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"


def _load(cluster: Any, **kwargs: Any) -> Any:
    return K8sEphemeralProvider.from_dict({"image": IMAGE, "cluster": cluster}, **kwargs).settings.cluster


def test_api_re_exports_the_same_cluster_types() -> None:
    assert api.KubeconfigFile is KubeconfigFile
    assert api.InCluster is InCluster
    assert api.DefaultCluster is DefaultCluster
    assert api.KubeconfigInline is KubeconfigInline


def test_provider_without_cluster_keeps_none_meaning_the_default() -> None:
    assert K8sEphemeralProvider.from_dict({"image": IMAGE}).settings.cluster is None


def test_cluster_config_builder_stores_the_selection_and_cluster_is_the_same_builder() -> None:
    chosen = KubeconfigFile("/etc/kube/config", "prod")
    assert K8sEphemeralProvider(IMAGE).cluster_config(chosen).settings.cluster == chosen
    assert K8sEphemeralProvider(IMAGE).cluster(InCluster()).settings.cluster == InCluster()


def test_cluster_config_refuses_a_value_that_is_not_a_selection() -> None:
    with pytest.raises(errors.ConfigError, match=r"cluster_config takes DefaultCluster.*got str"):
        K8sEphemeralProvider(IMAGE).cluster_config("prod")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"kubeconfig": "/etc/kube/config", "context": "prod"}, KubeconfigFile("/etc/kube/config", "prod")),
        ({"kubeconfig": "/etc/kube/config"}, KubeconfigFile("/etc/kube/config")),
        ({"in_cluster": True}, InCluster()),
        ({"context": "staging"}, DefaultCluster("staging")),
        ({}, DefaultCluster()),
        ({"in_cluster": False, "context": "dev"}, DefaultCluster("dev")),
        ({"kubeconfig_inline": "apiVersion: v1\n", "context": "x"}, KubeconfigInline("apiVersion: v1\n", "x")),
    ],
)
def test_cluster_section_maps_to_one_selection(section: dict[str, Any], expected: clusters.ClusterConfig) -> None:
    assert _load(section) == expected


def test_relative_kubeconfig_is_taken_from_the_provider_files_directory(tmp_path: Path) -> None:
    path = tmp_path / "provider.yaml"
    path.write_text(f"image: {IMAGE}\ncluster: {{kubeconfig: kube/config.yaml, context: prod}}\n")
    cluster = K8sEphemeralProvider.from_file(path).settings.cluster
    assert cluster == KubeconfigFile(str(tmp_path / "kube" / "config.yaml"), "prod")


def test_from_dict_base_applies_to_relative_paths_only(tmp_path: Path) -> None:
    assert _load({"kubeconfig": "kc"}, base=tmp_path) == KubeconfigFile(str(tmp_path / "kc"))
    assert _load({"kubeconfig": "/abs/kc"}, base=tmp_path) == KubeconfigFile("/abs/kc")
    assert _load({"kubeconfig": "kc"}) == KubeconfigFile("kc")


def test_unknown_cluster_key_is_refused_by_name_with_the_known_keys() -> None:
    with pytest.raises(errors.ConfigError) as info:
        _load({"server": "https://10.0.0.1"})
    assert info.value.message == (
        "cluster: unknown key 'server'; known: context, in_cluster, kubeconfig, kubeconfig_inline"
    )


@pytest.mark.parametrize(
    ("section", "words"),
    [
        ({"kubeconfig": "a", "in_cluster": True}, "got kubeconfig and in_cluster"),
        ({"kubeconfig": "a", "kubeconfig_inline": "b"}, "got kubeconfig and kubeconfig_inline"),
    ],
)
def test_two_sources_are_refused_naming_both(section: dict[str, Any], words: str) -> None:
    with pytest.raises(errors.ConfigError, match="takes one of kubeconfig, kubeconfig_inline, in_cluster: true") as i:
        _load(section)
    assert words in i.value.message


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ({"in_cluster": True, "context": "prod"}, "cluster.context: does not apply to in_cluster: true"),
        ({"in_cluster": "yes"}, "cluster.in_cluster: must be true or false, got str"),
        ({"kubeconfig": 3}, "cluster.kubeconfig: must be a string, got int"),
        ({"kubeconfig": " "}, "cluster.kubeconfig: must be a path to a kubeconfig file"),
        ({"kubeconfig_inline": ""}, "cluster.kubeconfig_inline: must hold a kubeconfig's YAML"),
        ({"context": ""}, "cluster.context: must not be empty"),
        ("prod", "cluster: must be a mapping, got str"),
    ],
)
def test_bad_cluster_values_name_the_setting(cluster: Any, message: str) -> None:
    with pytest.raises(errors.ConfigError) as info:
        _load(cluster)
    assert info.value.message.startswith(message)


def test_inline_kubeconfig_text_never_shows_in_the_provider_repr() -> None:
    token = "kube-token-very-secret-123"
    provider = K8sEphemeralProvider.from_dict(
        {"image": IMAGE, "cluster": {"kubeconfig_inline": f"users: [{{user: {{token: {token}}}}}]"}}
    )
    assert token not in repr(provider)
    assert token not in repr(provider.settings)
    assert token not in clusters.describe_cluster(provider.settings.cluster or DefaultCluster())


@pytest.mark.parametrize(
    ("cluster", "text"),
    [
        (DefaultCluster(), "default kubeconfig or in-cluster config"),
        (DefaultCluster("prod"), "default kubeconfig or in-cluster config (context 'prod')"),
        (InCluster(), "in-cluster config"),
        (KubeconfigFile("kc.yaml"), "kubeconfig file 'kc.yaml'"),
        (KubeconfigInline("x", "c"), "inline kubeconfig (context 'c')"),
    ],
)
def test_describe_cluster_names_the_source(cluster: clusters.ClusterConfig, text: str) -> None:
    assert clusters.describe_cluster(cluster) == text


def test_provider_with_a_cluster_imports_no_api_client() -> None:
    """Configuration stays free of kubernetes_asyncio: k8s/api.py loads it on connect (a second's import)."""
    code = (
        "import sys\n"
        "from ironflow.k8s.pod_provider import K8sEphemeralProvider\n"
        "K8sEphemeralProvider.from_dict({'image': 'i', 'cluster': {'kubeconfig': 'kc'}})\n"
        "print('kubernetes_asyncio' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]


def test_agent_sandbox_provider_types_its_cluster_with_the_same_check() -> None:
    from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider

    p = AgentSandboxProvider(K8sEphemeralProvider.sandboxed(IMAGE))
    assert p.cluster(InCluster()).settings.cluster == InCluster()
    with pytest.raises(errors.ConfigError, match=r"^cluster takes DefaultCluster, InCluster, .* got dict$"):
        p.cluster({"in_cluster": True})  # type: ignore[arg-type]


def test_agent_sandbox_file_reads_pod_cluster_relative_to_its_directory(tmp_path: Path) -> None:
    from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider

    path = tmp_path / "sandbox.yaml"
    path.write_text(f"pod: {{image: {IMAGE}, sandboxed: true, cluster: {{kubeconfig: kc.yaml}}}}\n")
    provider = AgentSandboxProvider.from_file(path)
    assert provider.settings.pod.settings.cluster == KubeconfigFile(str(tmp_path / "kc.yaml"))
