"""Kubernetes sandbox sessions: one idle pod per session, each request an exec into it.

``session_pod`` renders the pod and ``wire`` the exec's bytes (both pure); ``bridge`` serves a
session's socket over ``pods/exec``; ``clones`` clones a session's workspace and reads its
changes; ``objects`` is where sessions live (a pod here; agent-sandbox brings its claims);
``provisioner`` makes, reaches, finds and deletes a session's object through ``objects``;
``pod_sessions`` holds :class:`K8sSessions` (the table of sessions held here), built by
``K8sEphemeralProvider(...).sessions()``; ``archives`` keeps a workspace as a snapshot, ``pauses``
pauses a pod session with one (its record ``pause_records``), ``suspends`` is the idle logic both
backends' pauses share.
``ironflow.k8s.sessions`` was a module until this release: its names still resolve here, with
a DeprecationWarning.
"""

from ironflow._lazy import deprecated_exports

__all__: list[str] = []

__getattr__ = deprecated_exports(
    __name__,
    {"ironflow.k8s.sessions.pod_sessions": ("K8sSessions", "Found", "DEFAULT_START_TIMEOUT_S")},
    instead="ironflow.k8s.sessions.pod_sessions, or build them with K8sEphemeralProvider(...).sessions()",
)
