"""What a paused Kubernetes session keeps beside its archive, to be opened again as it was (pure).

A paused session has no pod (:mod:`ironflow.k8s.sessions.pauses`): what its pod was opened with
(its caller's labels, run, environment, expiry; the namespace and the API server it ran on) is
kept as :class:`PausedSession` in the record of its archive in the snapshot store, and a resume
opens it again from :meth:`PausedSession.options`. The environment is the pod's plain values only,
which :func:`~ironflow.k8s.sessions.session_pod.check_env` kept free of credentials at open. A
session whose pod holds what an archive of its workspace does not (a git workspace's base, an
egress token delivered into its HOME) is refused a pause in one line (:func:`refusal`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

from ironflow import errors
from ironflow.sandbox_runtime import SESSION_ENV
from ironflow.sessions.values import OpenOptions, SessionInfo, SessionNotFound

__all__ = ["RECORD_KEY", "PausedSession", "archive_name", "refusal", "session_of"]

#: The key of a paused session's record in its archive's ``snapshot.json``.
RECORD_KEY: Final = "paused_session"
_PREFIX: Final = "paused-"


def archive_name(session_id: str) -> str:
    """The name of a paused session's archive in the store (a label value, as snapshot names are).

    >>> archive_name("sbx-0123456789abcdef")
    'paused-sbx-0123456789abcdef'
    """
    return _PREFIX + session_id


def session_of(name: str | None) -> str | None:
    """The session whose paused archive ``name`` is, or None: a snapshot of someone's.

    >>> session_of("paused-sbx-0123456789abcdef"), session_of("fork-of-sbx-0123456789abcdef")
    ('sbx-0123456789abcdef', None)
    """
    return name[len(_PREFIX) :] if name is not None and name.startswith(_PREFIX) else None


def refusal(*, workspace: bool, env: Mapping[str, str], idle_suspend: bool = False) -> str | None:
    """Why a session cannot be paused, or None: its archive (the workspace) would not bring it back."""
    what = "idle suspend" if idle_suspend else "a pause"
    if workspace:
        return (
            f"a Kubernetes session with a git workspace cannot take {what}: its clone's base is outside the archive "
            "a pause keeps, so its changes could not be read after a resume"
        )
    if SESSION_ENV in env:
        return (
            f"a Kubernetes session opened with egress cannot take {what}: its egress token lives in its pod only "
            "(pause is for sessions without egress, or use agent-sandbox's home_volume)"
        )
    return None


@dataclasses.dataclass(frozen=True)
class PausedSession:
    """A paused session as its pod was opened: enough to open it again in the same place."""

    info: SessionInfo
    env: Mapping[str, str]
    namespace: str
    #: The API server's URL the session's pod ran on (the store is shared by every cluster).
    cluster: str

    def options(self, now: float) -> OpenOptions:
        """The open of its new pod: the same labels, run and environment, to the same expiry.

        Raises:
            SessionNotFound: its TTL passed while it was paused.
        """
        left = self.info.expires_at - now
        if left <= 0:
            raise SessionNotFound(f"sandbox session '{self.info.id}' has ended: its TTL passed while it was paused")
        return OpenOptions(ttl=left, labels=dict(self.info.labels), run_id=self.info.run_id, env=dict(self.env))

    def to_json(self) -> dict[str, object]:
        return {
            "info": self.info.to_json(),
            "env": dict(self.env),
            "namespace": self.namespace,
            "cluster": self.cluster,
        }

    @classmethod
    def from_json(cls, doc: object) -> PausedSession:
        """Raises: ConfigError: not a paused session's record."""
        if not isinstance(doc, Mapping):
            raise errors.ConfigError("a paused session's record must be a JSON object")
        info, env = doc.get("info"), doc.get("env")
        if not isinstance(info, Mapping) or not isinstance(env, Mapping):
            raise errors.ConfigError("a paused session's record has no info or env")
        try:
            found = SessionInfo.from_json(info)
        except (KeyError, ValueError) as exc:
            raise errors.ConfigError(f"a paused session's record is unreadable: {type(exc).__name__}") from None
        return cls(
            dataclasses.replace(found, paused=True),
            {str(k): str(v) for k, v in env.items()},
            str(doc.get("namespace", "")),
            str(doc.get("cluster", "")),
        )
