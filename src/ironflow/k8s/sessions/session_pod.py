"""A sandbox session's pod, rendered from the provider's settings, and read back (pure).

The pod is a command pod's posture (:func:`~ironflow.k8s.hardening.harden_pod_spec`:
non-root, read-only root, every capability dropped, no service-account token, HOME on a
size-limited emptyDir that is also the working directory, /tmp on another) with the
provider's image, resources, runtime class, node selector, tolerations and pull secrets.
Its one container runs the session runtime from the image on port 8888, ready once ``GET /``
answers, its token delivered after the start (:mod:`ironflow.k8s.sessions.runtime_pod`); in an
image without the runtime it idles, and each request is an exec (:mod:`ironflow.k8s.sessions.wire`).

Every session pod ends: ``ironflow.io/expires-at`` is its TTL's end (the orphan reaper
deletes it once passed, :mod:`ironflow.k8s.reaper`) and ``activeDeadlineSeconds`` stops it
a margin later even if nothing reaps. Its labels carry the session id, the run, and the
caller's labels; :func:`info_of` reads a :class:`~ironflow.sessions.SessionInfo` back from them,
so a session is found again by id from any process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from ironflow import errors, labels
from ironflow.claude import layout
from ironflow.k8s import hardening, step_manifests
from ironflow.k8s.commands import specs
from ironflow.k8s.sessions import runtime_pod, session_volumes
from ironflow.k8s.settings import ProviderSettings
from ironflow.sessions.values import SessionInfo

__all__ = [
    "BACKEND",
    "CONTAINER",
    "OWN_KEYS",
    "check_env",
    "check_labels",
    "created_at",
    "info_of",
    "session_pod",
]

BACKEND: Final = "k8s"
CONTAINER: Final = "sandbox"
#: The labels ironflow sets on a session's object: never the caller's.
OWN_KEYS: Final = frozenset(
    {labels.LABEL_MANAGED_BY, labels.LABEL_COMPONENT, labels.LABEL_SESSION_ID, labels.LABEL_RUN_ID}
)


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    """The session's environment, refused when it names a credential (it lands in the manifest).

    Raises:
        StepConfigError: a credential variable, or an ``sk-ant`` value.
    """
    for name, value in env.items():
        if layout.withheld_from_proxied_sandbox(name, value):
            raise errors.StepConfigError(
                f"a session's environment must not hold {name}: it would be in the pod's manifest"
            )
    return dict(env)


def check_labels(caller_labels: Mapping[str, str] | None, run_id: str | None) -> dict[str, str]:
    """The caller's labels of a session, and its run id, as Kubernetes takes them.

    Raises:
        ConfigError: a reserved or ironflow's own key, an invalid value, a run id that is no label value.
    """
    chosen = dict(caller_labels or {})
    specs.check_labels(chosen)
    for key in chosen:
        if key in OWN_KEYS:
            raise errors.ConfigError(f"label '{key}' is set by ironflow: drop it from the session's labels")
    if run_id is not None and not labels.is_valid_label_value(run_id):
        raise errors.ConfigError(f"run id '{errors.truncate(run_id, 80)}' is not a Kubernetes label value")
    return chosen


def session_pod(
    session_id: str,
    settings: ProviderSettings,
    *,
    ttl_s: float,
    now: float,
    caller_labels: Mapping[str, str] | None = None,
    run_id: str | None = None,
    env: Mapping[str, str] | None = None,
    home_claim: str | None = None,
) -> dict[str, Any]:
    """The session's Pod; ``now`` (epoch seconds) fixes its expiry; ``home_claim``: HOME on that
    claim instead of an emptyDir (:mod:`~ironflow.k8s.sessions.session_volumes`).

    Raises:
        ConfigError: a reserved or invalid label, a run id that is not a label value, a bad ttl.
    """
    specs.check_duration("ttl", ttl_s)
    chosen = check_labels(caller_labels, run_id)
    sandbox = settings.sandbox or hardening.SandboxSettings()
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": str(settings.image_pull_policy),
        "command": runtime_pod.main_command(),
        "workingDir": layout.SANDBOX_HOME,
        "ports": [{"name": runtime_pod.PORT_NAME, "containerPort": runtime_pod.PORT, "protocol": "TCP"}],
        "readinessProbe": runtime_pod.readiness_probe(),
        "env": [{"name": k, "value": v} for k, v in check_env(env or {}).items()],
    }
    resources = settings.resources.render()
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "activeDeadlineSeconds": math.ceil(ttl_s + sandbox.deadline_margin_s),
    }
    if settings.runtime_class:
        spec["runtimeClassName"] = settings.runtime_class
    spec.update(step_manifests.placement(settings))
    pod_labels = {**settings.pod_labels, **chosen, labels.LABEL_SESSION_ID: session_id}
    if run_id is not None:
        pod_labels[labels.LABEL_RUN_ID] = run_id
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": session_id,
            "namespace": settings.namespace,
            "labels": specs.object_labels(labels.COMPONENT_SANDBOX_SESSION, pod_labels),
            "annotations": {labels.ANNOTATION_EXPIRES_AT: str(math.ceil(now + ttl_s))},
        },
        "spec": hardening.harden_pod_spec(spec, sandbox),
    }
    return pod if home_claim is None else session_volumes.with_home_claim(pod, home_claim)


def created_at(meta: Mapping[str, Any]) -> float:
    """An object's creation time in epoch seconds (0 when unreadable)."""
    stamp = meta.get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return 0.0


def info_of(pod: Mapping[str, Any], *, settings_labels: Mapping[str, str] | None = None) -> SessionInfo | None:
    """The session a pod holds, or None when it is no session pod (or is being deleted)."""
    meta = pod.get("metadata") or {}
    pod_labels: Mapping[str, str] = meta.get("labels") or {}
    if pod_labels.get(labels.LABEL_COMPONENT) != labels.COMPONENT_SANDBOX_SESSION or meta.get("deletionTimestamp"):
        return None
    session_id = pod_labels.get(labels.LABEL_SESSION_ID, "")
    if session_id != meta.get("name"):
        return None
    skip = OWN_KEYS | set(settings_labels or ())
    expiry = labels.expires_at(meta.get("annotations"))
    return SessionInfo(
        id=session_id,
        backend=BACKEND,
        isolation=str((pod.get("spec") or {}).get("runtimeClassName") or "pod"),
        created_at=created_at(meta),
        expires_at=float(expiry or 0),
        labels={k: v for k, v in pod_labels.items() if k not in skip},
        run_id=pod_labels.get(labels.LABEL_RUN_ID),
    )
