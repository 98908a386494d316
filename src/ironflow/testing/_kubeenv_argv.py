"""The real control plane's command lines, as values: the work dir's layout and each component's argv.

Pure: a :class:`Layout` and ports in, ``list[str]`` out. Every component listens on 127.0.0.1
only; the admin certificate serves TLS and authenticates every component (see
:mod:`._kubeenv_pki`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Layout",
    "agent_sandbox_args",
    "apiserver_args",
    "controller_manager_args",
    "etcd_args",
    "kwok_args",
    "scheduler_args",
]


@dataclass(frozen=True)
class Layout:
    """The files of one cluster's work dir."""

    root: Path

    def path(self, name: str) -> Path:
        return self.root / name

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (client certificate by path), for the Go components."""
        return self.path("admin.kubeconfig")


def etcd_args(layout: Layout, *, client_url: str, peer_port: int) -> list[str]:
    return [
        "--name=node0",
        f"--data-dir={layout.path('etcd')}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-cluster=node0=http://127.0.0.1:{peer_port}",
        "--listen-metrics-urls=",
        "--unsafe-no-fsync",  # a test store need not survive a crash
        "--auto-compaction-retention=1",
        "--log-level=warn",
    ]


def apiserver_args(layout: Layout, *, etcd_url: str, port: int, node_ip: str | None = None) -> list[str]:
    """With ``node_ip`` (a real node, all in the node's network namespace): listen on every address
    there, advertise the node's, keep the ``kubernetes`` Service's endpoints, talk to kubelet by cert."""
    if node_ip is not None:
        node = [
            "--bind-address=0.0.0.0",
            f"--advertise-address={node_ip}",
            f"--kubelet-client-certificate={layout.path('admin.crt')}",
            f"--kubelet-client-key={layout.path('admin.key')}",
        ]
    else:
        node = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]
    return [
        f"--etcd-servers={etcd_url}",
        *node,
        f"--secure-port={port}",
        f"--tls-cert-file={layout.path('admin.crt')}",
        f"--tls-private-key-file={layout.path('admin.key')}",
        f"--client-ca-file={layout.path('ca.crt')}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={layout.path('sa.pub')}",
        f"--service-account-signing-key-file={layout.path('sa.key')}",
        "--authorization-mode=Node,RBAC",
        # on top of the defaults (PodSecurity, ServiceAccount, ...): lets a namespace keep
        # its pods unscheduled (the contract suite's kubelet-manual-* namespaces)
        "--enable-admission-plugins=PodNodeSelector",
        "--allow-privileged=true",
        "--service-cluster-ip-range=10.96.0.0/16",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--enable-priority-and-fairness=false",
        "--max-requests-inflight=0",
        "--max-mutating-requests-inflight=0",
        "--profiling=false",
        "--logging-format=text",
        "-v=1",
    ]


def _controller_common(layout: Layout) -> list[str]:
    return [
        f"--kubeconfig={layout.kubeconfig}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--kube-api-qps=500",
        "--kube-api-burst=1000",
    ]


def controller_manager_args(layout: Layout, *, port: int) -> list[str]:
    return [
        *_controller_common(layout),
        f"--secure-port={port}",
        f"--root-ca-file={layout.path('ca.crt')}",
        f"--service-account-private-key-file={layout.path('sa.key')}",
        "--use-service-account-credentials=false",
        "--node-monitor-grace-period=60s",
    ]


def scheduler_args(layout: Layout, *, port: int) -> list[str]:
    return [*_controller_common(layout), f"--secure-port={port}"]


def kwok_args(layout: Layout, *, port: int) -> list[str]:
    return [
        f"--kubeconfig={layout.kubeconfig}",
        f"--config={layout.path('kwok.yaml')}",
        "--manage-all-nodes=true",
        "--node-ip=127.0.0.1",
        "--node-name=localhost",
        f"--node-port={port}",
        f"--server-address=127.0.0.1:{port}",
        f"--tls-cert-file={layout.path('admin.crt')}",
        f"--tls-private-key-file={layout.path('admin.key')}",
        "--node-lease-duration-seconds=40",
        "--enable-crds=Logs,ClusterLogs,Exec,ClusterExec",
    ]


def agent_sandbox_args(layout: Layout) -> list[str]:
    return [
        f"--kubeconfig={layout.kubeconfig}",
        "--leader-elect=false",
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
        "--extensions",
    ]
