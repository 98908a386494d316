"""Kubernetes sandbox sessions: one idle pod per session, each request an exec into it.

``session_pod`` renders the pod and ``wire`` the exec's bytes (both pure); ``bridge`` serves a
session's socket over ``pods/exec``; ``clones`` clones a session's workspace and reads its
changes; ``pod_sessions`` holds :class:`K8sSessions`. ``ironflow.k8s.sessions.K8sSessions``
was a module until this release: the name still resolves, with a DeprecationWarning.
"""

from ironflow._lazy import deprecated_exports

__all__: list[str] = []

__getattr__ = deprecated_exports(
    __name__,
    {"ironflow.k8s.sessions.pod_sessions": ("K8sSessions", "Found", "DEFAULT_START_TIMEOUT_S")},
    instead="ironflow.k8s (K8sSessions) or provider.sessions()",
)
