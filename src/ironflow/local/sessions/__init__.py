"""Local sandbox sessions: the session host, its gVisor runtime, agents and workspace changesets.

``sandbox_sessions`` holds :class:`LocalSessions` (bubblewrap or gVisor, as the provider says);
``gvisor_runtime`` the runsc bundle and socket; ``agents`` an agent step inside a session;
``changesets`` a session's workspace copy and its changes. ``ironflow.local.sessions.LocalSessions``
was a module until this release: the name still resolves, with a DeprecationWarning.
"""

from ironflow._lazy import deprecated_exports

__all__: list[str] = []

__getattr__ = deprecated_exports(
    __name__,
    {
        "ironflow.local.sessions.sandbox_sessions": (
            "LocalSessions",
            "DEFAULT_MAX_UPLOAD_BYTES",
            "RUNTIME_DIR",
            "RUNTIME_PATH",
        )
    },
    instead="ironflow.local (LocalSessions) or provider.sessions()",
)
