"""Test helpers users can rely on: a Kubernetes API test server, a real control plane,
a throwaway PostgreSQL server, a throwaway Temporal dev server, the pinned Helm CLI
(:mod:`ironflow.testing.helm`), a recording provider, and secret-leak assertions.

Nothing here is imported by the library itself. The helpers load on first use (see
:mod:`ironflow._lazy`): a test of PostgreSQL alone does not load the Kubernetes
test server's stack.
"""

from typing import TYPE_CHECKING

from ironflow._lazy import lazy_exports
from ironflow.secrets import find_leaks

if TYPE_CHECKING:
    from ironflow.testing.engine import RecordingProvider
    from ironflow.testing.kube import KubeTestServer
    from ironflow.testing.kubeenv import KubeEnv
    from ironflow.testing.postgres_server import PostgresServer
    from ironflow.testing.temporal_server import TemporalDevServer
    from ironflow.testing.threaded_kube import ThreadedKube

__all__ = [
    "KubeEnv",
    "KubeTestServer",
    "PostgresServer",
    "RecordingProvider",
    "TemporalDevServer",
    "ThreadedKube",
    "assert_no_leaks",
    "find_leaks",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "engine": ("RecordingProvider",),
        "kube": ("KubeTestServer",),
        "kubeenv": ("KubeEnv",),
        "postgres_server": ("PostgresServer",),
        "temporal_server": ("TemporalDevServer",),
        "threaded_kube": ("ThreadedKube",),
    },
)


def assert_no_leaks(secrets: list[str], *haystacks: object) -> None:
    """Fail when any secret value appears in any haystack (text, dict, exception...)."""
    leaks = find_leaks(secrets, *haystacks)
    assert not leaks, f"secret values leaked: {leaks}"
