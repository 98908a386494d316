"""Sandbox settings into a hardened pod spec: security contexts, HOME and /tmp, no SA token (pure).

The rule table (§1.5), applied by :func:`harden_pod_spec` to any pod spec, so the
ephemeral provider and the agent-sandbox renderer produce the same posture:

========================  ====================================================================
pod securityContext       runAsNonRoot, runAsUser/runAsGroup/fsGroup = uid, seccomp RuntimeDefault
every container           no privilege escalation, read-only root (unless writable_root),
                          runAsNonRoot, all capabilities dropped, seccomp RuntimeDefault
main container            HOME on a size-limited emptyDir, /tmp on another; HOME=/home/claude
                          and TMPDIR=/tmp unless the caller set them
conversations claim       PVC at ~/.claude/projects (Claude Code's conversations), mounted after
                          HOME so it is not hidden
service account token     not mounted (automountServiceAccountToken false) unless the step
                          names a service account: then the field is left to that account
========================  ====================================================================

Every agent pod (sandboxed or not) and every ``restricted()`` ``PodRun``/``JobRun`` pod (``exec``,
push) also carries ``terminationGracePeriodSeconds`` :data:`STEP_TERMINATION_GRACE_S`.

Never relaxes anything by itself: every relaxation is a field of :class:`SandboxSettings`
the caller chose explicitly.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ironflow import errors
from ironflow._renamed import renamed_argument, renamed_names
from ironflow.claude import layout
from ironflow.kube import quantities

__all__ = [
    "CONVERSATIONS_VOLUME",
    "DEFAULT_DEADLINE_MARGIN_S",
    "HOME_VOLUME",
    "STEP_TERMINATION_GRACE_S",
    "TMP_VOLUME",
    "SandboxSettings",
    "container_security_context",
    "harden_pod_spec",
    "pod_security_context",
]

DEFAULT_DEADLINE_MARGIN_S: Final = 60.0
HOME_VOLUME: Final = "ironflow-home"
#: The conversations claim's volume: the name is shared with the reference implementation (a wire
#: name), so it keeps saying "sessions" (Claude Code's word for a conversation).
CONVERSATIONS_VOLUME: Final = "ironflow-sessions"
TMP_VOLUME: Final = "ironflow-tmp"
#: Seconds from the kubelet's SIGTERM to its SIGKILL for a step pod (Kubernetes' default: 30).
#: A step pod is a single-use sandbox with nothing to flush (its result is its log), and its PID 1
#: (``sh -c``; Node.js would be no better) ignores SIGTERM, so any grace is waited out in full: a
#: release, a retry's cleanup, the reaper or a cancel each waited 30 s per running pod. 2 is the
#: kubelet's own floor for a container's grace. The pod spec carries it, not each delete call, so
#: every deletion gets it: ironflow's, a Job's garbage collection, an operator's ``kubectl delete``.
STEP_TERMINATION_GRACE_S: Final = 2


@dataclass(frozen=True)
class SandboxSettings:
    """How a sandboxed pod runs; the defaults are the hardened posture.

    ``deadline_margin_s`` is added to the step timeout for ``activeDeadlineSeconds`` and
    for the expiry annotation the reaper reads.
    """

    run_as_user: int = layout.SANDBOX_UID
    writable_root: bool = False
    home_size_limit: str = "1Gi"
    tmp_size_limit: str = "512Mi"
    deadline_margin_s: float = DEFAULT_DEADLINE_MARGIN_S

    def __post_init__(self) -> None:
        if isinstance(self.run_as_user, bool) or not isinstance(self.run_as_user, int) or self.run_as_user <= 0:
            raise errors.ConfigError("run_as_user must be greater than 0")
        for name in ("home_size_limit", "tmp_size_limit"):
            if not str(getattr(self, name)).strip():
                raise errors.ConfigError(f"{name} must be a Kubernetes quantity such as '1Gi', got an empty value")
            problem = quantities.quantity_problem(name, getattr(self, name), example="1Gi")
            if problem is not None:
                raise errors.ConfigError(problem)
        if not (math.isfinite(self.deadline_margin_s) and self.deadline_margin_s >= 0):
            raise errors.ConfigError(
                f"deadline_margin must be a finite number of seconds >= 0, got {self.deadline_margin_s!r}"
            )


def pod_security_context(settings: SandboxSettings) -> dict[str, Any]:
    uid = settings.run_as_user
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context(settings: SandboxSettings) -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": not settings.writable_root,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def harden_pod_spec(
    spec: dict[str, Any],
    settings: SandboxSettings,
    *,
    conversations_claim: str | None = None,
    sessions_claim: str | None = None,
) -> dict[str, Any]:
    """A copy of ``spec`` with the sandbox posture applied; ``spec`` is left untouched.

    ``containers[0]`` is the agent: it gets HOME and /tmp (and the conversations claim, the PVC
    keeping Claude Code's conversations); every container and init container gets the hardened
    securityContext. HOME/TMP volumes are appended after the caller's volumes, HOME/TMPDIR after
    its env. ``sessions_claim`` is the old name of ``conversations_claim`` (warns; next release: gone).
    """
    where = "ironflow.k8s.hardening.harden_pod_spec"
    conversations_claim = renamed_argument(
        where, "sessions_claim", sessions_claim, "conversations_claim", conversations_claim
    )
    out = copy.deepcopy(spec)
    containers: list[dict[str, Any]] = out.get("containers") or []
    if not containers:
        raise ValueError("harden_pod_spec needs a pod spec with at least one container")
    main = containers[0]

    volumes: list[dict[str, Any]] = out.setdefault("volumes", [])
    mounts: list[dict[str, Any]] = main.setdefault("volumeMounts", [])
    volumes.append({"name": HOME_VOLUME, "emptyDir": {"sizeLimit": settings.home_size_limit}})
    mounts.append({"name": HOME_VOLUME, "mountPath": layout.SANDBOX_HOME})
    if conversations_claim is not None:
        # After HOME: a mount under HOME must come later or the emptyDir hides it.
        volumes.append({"name": CONVERSATIONS_VOLUME, "persistentVolumeClaim": {"claimName": conversations_claim}})
        mounts.append({"name": CONVERSATIONS_VOLUME, "mountPath": layout.CONVERSATIONS_MOUNT_PATH})
    volumes.append({"name": TMP_VOLUME, "emptyDir": {"sizeLimit": settings.tmp_size_limit}})
    mounts.append({"name": TMP_VOLUME, "mountPath": layout.SANDBOX_TMP})

    env: list[dict[str, Any]] = main.setdefault("env", [])
    present = {entry["name"] for entry in env}
    for name, value in (("HOME", layout.SANDBOX_HOME), ("TMPDIR", layout.SANDBOX_TMP)):
        if name not in present:
            env.append({"name": name, "value": value})

    for container in [*containers, *(out.get("initContainers") or [])]:
        container["securityContext"] = container_security_context(settings)
    out["securityContext"] = pod_security_context(settings)
    if not out.get("serviceAccountName"):
        # No account named: nothing in the pod may talk to the API server as anyone.
        out["automountServiceAccountToken"] = False
    return out


# The old names (ironflow._renamed), for one release: a type checker reads an alias, a run warns.
if TYPE_CHECKING:
    SESSIONS_VOLUME = CONVERSATIONS_VOLUME
else:
    __getattr__ = renamed_names(__name__)
