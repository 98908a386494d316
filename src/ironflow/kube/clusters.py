"""Cluster selection: which Kubernetes API a client talks to, as plain values.

Pure: these values name a source (the default kubeconfig, the pod's service account, a
kubeconfig file, a kubeconfig text) and never read it. Only ``k8s/api.py`` turns one into
a connection, so configuration (``K8sEphemeralProvider``) can hold a selection without
importing an API client. ``k8s/api.py`` re-exports every name here.

Invariant: the repr of an inline kubeconfig never shows its text (it may hold a token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from ironflow import errors

__all__ = [
    "ClusterConfig",
    "DefaultCluster",
    "InCluster",
    "KubeconfigFile",
    "KubeconfigInline",
    "check_cluster",
    "describe_cluster",
]


@dataclass(frozen=True)
class DefaultCluster:
    """The kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``), else the in-cluster service account."""

    context: str | None = None


@dataclass(frozen=True)
class InCluster:
    """The pod's service account token and the ``KUBERNETES_SERVICE_*`` variables."""


@dataclass(frozen=True)
class KubeconfigFile:
    """An explicit kubeconfig file, optionally with a context other than the current one."""

    path: str
    context: str | None = None


@dataclass(frozen=True)
class KubeconfigInline:
    """A kubeconfig given as YAML text (e.g. from a Secret); its repr hides the text."""

    yaml: str = field(repr=False)
    context: str | None = None


ClusterConfig: TypeAlias = DefaultCluster | InCluster | KubeconfigFile | KubeconfigInline


def check_cluster(value: object, *, method: str) -> ClusterConfig:
    """``value`` if it is a cluster selection, else a ``ConfigError`` naming ``method`` and the types."""
    if not isinstance(value, DefaultCluster | InCluster | KubeconfigFile | KubeconfigInline):
        raise errors.ConfigError(
            f"{method} takes DefaultCluster, InCluster, KubeconfigFile or KubeconfigInline "
            f"(ironflow.kube.clusters), got {type(value).__name__}"
        )
    return value


def describe_cluster(cluster: ClusterConfig) -> str:
    """A short name of the selection for messages; never the inline text.

    >>> describe_cluster(KubeconfigFile("kc.yaml", "prod"))
    "kubeconfig file 'kc.yaml' (context 'prod')"
    >>> describe_cluster(KubeconfigInline("token: s3cret"))
    'inline kubeconfig'
    """
    match cluster:
        case DefaultCluster(context=context):
            what = "default kubeconfig or in-cluster config"
        case InCluster():
            return "in-cluster config"
        case KubeconfigFile(path=path, context=context):
            what = f"kubeconfig file '{path}'"
        case KubeconfigInline(context=context):
            what = "inline kubeconfig"
    return what if context is None else f"{what} (context '{context}')"
