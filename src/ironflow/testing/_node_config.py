"""The real node's configuration files and command lines, as values (pure).

A :class:`NodeLayout` (the work dir, the node's address, its cgroup) in, file text or argv out:
containerd's config (runc and the gVisor shim), runsc's, the CNI bridge, kubelet's, kube-proxy's
and kube-router's flags, CoreDNS's objects and the RuntimeClass. Every path is under the work dir
or the node's private mounts, so nothing on the host is written; the values that would make a
component change a host setting (conntrack sysctls, OOM scores, kernel defaults) are set so that
it only checks, never writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "CLUSTER_DNS_IP",
    "CNI_BIN_DIR",
    "COREDNS_IMAGE",
    "CSI_DRIVER",
    "CSI_SNAPSHOT_CLASS",
    "CSI_STORAGE_CLASS",
    "KUBERNETES_SERVICE_IP",
    "NODE_IP",
    "NODE_NAME",
    "PAUSE_IMAGE",
    "POD_CIDR",
    "SERVICE_CIDR",
    "NodeLayout",
    "cni_conflist",
    "containerd_toml",
    "coredns_objects",
    "kube_proxy_config",
    "kube_router_args",
    "kubelet_args",
    "kubelet_config",
    "runsc_toml",
    "runtime_class",
    "sysctl_values",
]

NODE_NAME: Final = "ironflow-node-0"
#: The node's address: on a veth inside the node's network namespace (no ``dummy`` link here).
NODE_IP: Final = "10.200.0.2"
NODE_GATEWAY: Final = "10.200.0.1"
POD_CIDR: Final = "10.244.0.0/24"
SERVICE_CIDR: Final = "10.96.0.0/16"
#: The ``kubernetes`` Service's address (the first of the range): pods reach the API server there.
KUBERNETES_SERVICE_IP: Final = "10.96.0.1"
CLUSTER_DNS_IP: Final = "10.96.0.10"
CNI_BIN_DIR: Final = "/usr/lib/cni"  # Debian's containernetworking-plugins
PAUSE_IMAGE: Final = "localhost/ironflow/pause:3.10"
COREDNS_IMAGE: Final = "localhost/ironflow/coredns:1.14.7"
#: The node's CSI driver (``RealNodeEnv(csi=True)``): ironflow's own hostpath stand-in, see :mod:`._node_csi`.
CSI_DRIVER: Final = "hostpath.csi.ironflow.io"
#: The StorageClass of its volumes (provisioned at once, deleted with their claim).
CSI_STORAGE_CLASS: Final = "ironflow-csi-hostpath"
#: The VolumeSnapshotClass of its snapshots (deleted with their VolumeSnapshot).
CSI_SNAPSHOT_CLASS: Final = "ironflow-csi-hostpath"


def sysctl_values() -> dict[str, str]:
    """What kubelet checks (``protectKernelDefaults``) under ``/proc/sys``, bound over those files in
    the node's mount namespace so that kubelet finds them set and the host's values never change."""
    return {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1", "vm/panic_on_oom": "0"}


@dataclass(frozen=True)
class NodeLayout:
    """One node's files, and the cgroup its pods go under (the same path in every hierarchy)."""

    root: Path
    cgroup: str  # e.g. ``/ironflow-node-1234``
    bin_dir: Path

    def path(self, name: str) -> Path:
        return self.root / "node" / name

    @property
    def containerd_socket(self) -> Path:
        return self.path("containerd/containerd.sock")


def containerd_toml(layout: NodeLayout) -> str:
    """containerd 2.x (config version 3): CRI with runc and runsc, the local pause image, no OOM
    score below the caller's (root here cannot lower one), pod netns under the state dir."""
    p = layout.path
    return f"""version = 3
root = "{p("containerd/root")}"
state = "{p("containerd/state")}"

[grpc]
  address = "{layout.containerd_socket}"

[ttrpc]
  address = "{p("containerd/containerd.sock.ttrpc")}"

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "{p("runsc.toml")}"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{CNI_BIN_DIR}"]
    conf_dir = "{p("cni")}"
    max_conf_num = 1

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"
"""


def runsc_toml(layout: NodeLayout) -> str:
    """The gVisor shim's options: the runsc built with the node, systrap (no KVM needed)."""
    return f"""binary_name = "{layout.bin_dir / "runsc"}"
root = "{layout.path("runsc")}"

[runsc_config]
  platform = "systrap"
  debug-log = "{layout.path("runsc-logs")}/"
"""


def cni_conflist(layout: NodeLayout) -> str:
    """The bridge plugin with host-local addresses (their lease files in the work dir), and portmap."""
    doc = {
        "cniVersion": "1.0.0",
        "name": "ironflow-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.path("cni-ipam")),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(doc, indent=2)


def kubelet_config(layout: NodeLayout) -> dict[str, Any]:
    """KubeletConfiguration: cgroupfs under the node's cgroup, cgroup v1 allowed, kernel defaults
    checked not written, x509 from the cluster CA, the cluster DNS, no eviction on a busy CI disk."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": layout.cgroup,
        "failCgroupV1": False,
        "failSwapOn": False,
        "protectKernelDefaults": True,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "tlsCertFile": str(layout.root / "admin.crt"),
        "tlsPrivateKeyFile": str(layout.root / "admin.key"),
        "authentication": {
            "x509": {"clientCAFile": str(layout.root / "ca.crt")},
            "webhook": {"enabled": False},
            "anonymous": {"enabled": False},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDomain": "cluster.local",
        "clusterDNS": [CLUSTER_DNS_IP],
        "resolvConf": str(layout.path("resolv.conf")),
        "podLogsDir": str(layout.path("pod-logs")),
        "serializeImagePulls": False,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusReportFrequency": "10s",
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "maxPods": 110,
        "podCIDR": POD_CIDR,
        "registerNode": True,
        "localStorageCapacityIsolation": True,
        "shutdownGracePeriod": "0s",
    }


def kubelet_args(layout: NodeLayout, *, kubeconfig: Path) -> list[str]:
    return [
        f"--config={layout.path('kubelet.yaml')}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.path('kubelet')}",
        f"--node-ip={NODE_IP}",
        f"--hostname-override={NODE_NAME}",
        "--v=1",
    ]


def kube_proxy_config(*, kubeconfig: Path) -> dict[str, Any]:
    """iptables mode; conntrack settings zero so kube-proxy never writes the host's conntrack sysctls."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": POD_CIDR,
        "bindAddress": NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"syncPeriod": "1s", "minSyncPeriod": "0s", "masqueradeAll": False},
    }


def kube_router_args(*, kubeconfig: Path) -> list[str]:
    """kube-router as the NetworkPolicy firewall only (no routing, no service proxy, no CNI)."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={NODE_NAME}",
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        "--enable-cni=false",
        "--iptables-sync-period=2s",
        "--ipvs-sync-period=2s",
        "--health-port=20244",
        "--metrics-port=0",
        "--v=1",
    ]


def runtime_class() -> dict[str, Any]:
    """RuntimeClass ``gvisor`` (handler ``runsc``), the name ironflow's gVisor setting uses."""
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"}, "handler": "runsc"}


_COREFILE: Final = """.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
"""


def coredns_objects() -> list[dict[str, Any]]:
    """CoreDNS as production runs it: a Deployment in kube-system labelled ``k8s-app=kube-dns``
    behind Service ``kube-dns`` at the cluster DNS address, with its read-only ClusterRole."""
    labels = {"k8s-app": "kube-dns"}
    ns = "kube-system"
    rules = [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    container = {
        "name": "coredns",
        "image": COREDNS_IMAGE,
        "imagePullPolicy": "Never",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [{"containerPort": 53, "protocol": "UDP", "name": "dns"}, {"containerPort": 53, "name": "dns-tcp"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 1},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            "readOnlyRootFilesystem": True,
        },
        "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "10m", "memory": "32Mi"}},
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": ns}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": ns},
            "data": {"Corefile": _COREFILE},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "coredns", "namespace": ns, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "dnsPolicy": "Default",
                        "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": ns, "labels": labels},
            "spec": {
                "selector": labels,
                "clusterIP": CLUSTER_DNS_IP,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]
