"""The real node's configuration as values: every file and state path under the work dir, the
settings that keep components from writing host state, and reproducible scratch images."""

from __future__ import annotations

import json
import tarfile
import tomllib
from pathlib import Path

from ironflow.testing import _node_config as config
from ironflow.testing._node_images import scratch_archive

LAYOUT = config.NodeLayout(root=Path("/w"), cgroup="/ironflow-node-7", bin_dir=Path("/b"))


def _paths(value: object) -> list[str]:
    if isinstance(value, dict):
        return [p for v in value.values() for p in _paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in _paths(v)]
    return [value] if isinstance(value, str) and value.startswith("/") else []


def test_containerd_keeps_its_state_under_the_work_dir_and_never_lowers_an_oom_score() -> None:
    doc = tomllib.loads(config.containerd_toml(LAYOUT))
    runtime = doc["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True  # root here cannot lower one
    assert runtime["netns_mounts_under_state_dir"] is True
    runtimes = runtime["containerd"]["runtimes"]
    assert runtimes["runsc"]["runtime_type"] == "io.containerd.runsc.v1"
    assert runtimes["runc"]["options"]["SystemdCgroup"] is False
    allowed = ("/w/", "/usr/sbin/runc", config.CNI_BIN_DIR)
    assert all(p.startswith(allowed) for p in _paths(doc)), _paths(doc)
    assert doc["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == config.PAUSE_IMAGE


def test_kubelet_checks_kernel_defaults_and_puts_pods_under_the_nodes_cgroup() -> None:
    cfg = config.kubelet_config(LAYOUT)
    assert cfg["protectKernelDefaults"] is True  # checks, never writes the host's sysctls
    assert cfg["cgroupRoot"] == "/ironflow-node-7"
    assert cfg["failCgroupV1"] is False
    assert cfg["clusterDNS"] == [config.CLUSTER_DNS_IP]
    paths = [p for p in _paths(cfg) if not p.startswith("/ironflow-node-")]
    assert all(p.startswith("/w/") for p in paths), paths
    assert set(config.sysctl_values()) >= {"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}


def test_kube_proxy_leaves_conntrack_sysctls_alone_and_kube_router_is_a_firewall_only() -> None:
    proxy = config.kube_proxy_config(kubeconfig=Path("/w/k"))
    assert proxy["conntrack"] == {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"}
    args = config.kube_router_args(kubeconfig=Path("/w/k"))
    assert {"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false"} <= set(args)


def test_cni_leases_and_coredns_objects() -> None:
    cni = json.loads(config.cni_conflist(LAYOUT))
    assert cni["plugins"][0]["ipam"]["dataDir"].startswith("/w/")
    kinds = [o["kind"] for o in config.coredns_objects()]
    assert kinds == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"]
    service = config.coredns_objects()[-1]
    assert service["spec"]["clusterIP"] == config.CLUSTER_DNS_IP
    assert config.runtime_class()["handler"] == "runsc"


def test_a_scratch_archive_is_reproducible_and_loadable(tmp_path: Path) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(b"\x7fELF fake")
    one = scratch_archive(tmp_path / "a.tar", "localhost/x/tool:1", binary, entrypoint=["/tool"])
    two = scratch_archive(tmp_path / "b.tar", "localhost/x/tool:1", binary, entrypoint=["/tool"])
    assert one.read_bytes() == two.read_bytes()
    with tarfile.open(one) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest[0]["RepoTags"] == ["localhost/x/tool:1"]
        config_doc = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
        assert config_doc["config"] == {"Entrypoint": ["/tool"], "User": "65535:65535"}
        layer = tar.extractfile(manifest[0]["Layers"][0])
        assert layer is not None
        with tarfile.open(fileobj=layer) as inner:
            member = inner.getmember("tool")
            assert member.mode == 0o755
            assert member.mtime == 0
