"""The Kubernetes client layer: the API, cluster selection, the shared informer, pod status.

``api`` is the only module of ironflow that imports ``kubernetes_asyncio``; everything
above talks to the cluster through :class:`~ironflow.kube.api.KubeApi`. This package
knows nothing of agents, steps or sandboxes: it imports ironflow's values only. The
facade is lazy, so the pure ``clusters`` and ``pod_status`` load without the client.
"""

from typing import TYPE_CHECKING

from ironflow._lazy import lazy_exports
from ironflow.kube.clusters import ClusterConfig, DefaultCluster, InCluster, KubeconfigFile, KubeconfigInline

if TYPE_CHECKING:
    from ironflow.kube.api import KubeApi

__all__ = ["ClusterConfig", "DefaultCluster", "InCluster", "KubeApi", "KubeconfigFile", "KubeconfigInline"]

__getattr__ = lazy_exports(__name__, {"api": ("KubeApi",)})
