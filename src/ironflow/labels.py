"""Label and annotation keys, selectors, and the label-value sanitiser (pure).

Every module that writes or selects ironflow objects imports its keys from here, so a
cluster prepared for the reference implementation sees the same wire names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = [
    "AGENT_SANDBOX_KEY_PREFIX",
    "ANNOTATION_EXPIRES_AT",
    "ANNOTATION_SANDBOX_POD_NAME",
    "ANNOTATION_WORKSPACE_COMMIT",
    "ANNOTATION_WORKSPACE_REF",
    "ANNOTATION_WORKSPACE_SOURCE",
    "COMPONENT_CLAUDE_RUNNER",
    "COMPONENT_ENVIRONMENT",
    "COMPONENT_JOB_RUN",
    "COMPONENT_POD_RUN",
    "COMPONENT_POD_UP",
    "COMPONENT_PROMPT_DATA",
    "COMPONENT_SANDBOX_CLAIM",
    "COMPONENT_SANDBOX_SESSION",
    "COMPONENT_SESSION_HOME",
    "ENVIRONMENT_SELECTOR",
    "LABEL_COMPONENT",
    "LABEL_EGRESS_PROFILE",
    "LABEL_MANAGED_BY",
    "LABEL_NAME",
    "LABEL_OWNER",
    "LABEL_PART_OF",
    "LABEL_ROLE",
    "LABEL_ROOT_RUN_ID",
    "LABEL_RUN_ID",
    "LABEL_SANDBOX_LAUNCH_TYPE",
    "LABEL_SANDBOX_NAME_HASH",
    "LABEL_SESSION_DIR",
    "LABEL_SESSION_ID",
    "LABEL_SNAPSHOT_ID",
    "LABEL_STEP",
    "LABEL_WARM_POOL_SANDBOX",
    "LABEL_WORKER_UID",
    "MANAGED_BY_VALUE",
    "MANAGED_SELECTOR",
    "PART_OF_VALUE",
    "PROMPT_SELECTOR",
    "RESERVED_LABELS",
    "RUNNER_SELECTOR",
    "SANDBOX_CLAIM_SELECTOR",
    "SANDBOX_SESSION_SELECTOR",
    "SERVICE_PORT_NAMES",
    "SESSION_HOME_SELECTOR",
    "expires_at",
    "is_dns_label",
    "is_dns_subdomain",
    "is_reserved_label",
    "is_valid_label_value",
    "label_key_problem",
    "label_value_problem",
    "reserved_label_message",
    "sanitize_label_value",
    "scope_labels",
    "selector",
]

LABEL_RUN_ID: Final = "ironflow.io/run-id"
LABEL_ROOT_RUN_ID: Final = "ironflow.io/root-run-id"
LABEL_STEP: Final = "ironflow.io/step"
#: An agent step's role (``AgentConfig.role``), on its stored step: what per-role cost caps sum.
LABEL_ROLE: Final = "ironflow.io/role"
LABEL_EGRESS_PROFILE: Final = "ironflow.io/egress-profile"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
#: ``app.kubernetes.io/name`` of long-lived pods (auth proxy, worker) that policies select.
LABEL_NAME: Final = "app.kubernetes.io/name"
#: ``app.kubernetes.io/part-of`` of cluster set-up objects (``PART_OF_VALUE``), not step objects.
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
ANNOTATION_EXPIRES_AT: Final = "ironflow.io/expires-at"
#: A cluster session's git workspace, on its pod (or claim): the source, ref and starting commit.
ANNOTATION_WORKSPACE_SOURCE: Final = "ironflow.io/workspace-source"
ANNOTATION_WORKSPACE_REF: Final = "ironflow.io/workspace-ref"
ANNOTATION_WORKSPACE_COMMIT: Final = "ironflow.io/workspace-commit"

MANAGED_BY_VALUE: Final = "ironflow"
PART_OF_VALUE: Final = "ironflow"
COMPONENT_CLAUDE_RUNNER: Final = "claude-runner"
COMPONENT_PROMPT_DATA: Final = "prompt-data"
COMPONENT_POD_RUN: Final = "pod-run"
COMPONENT_JOB_RUN: Final = "job-run"
#: A run's service pod (``PodUp``: a database for the agent's tests).
COMPONENT_POD_UP: Final = "pod-up"
#: The container port names a ``PodUp`` gives its declared ports, in order: the rendered
#: NetworkPolicies open these names (a policy's named port is each pod's own), nothing else.
SERVICE_PORT_NAMES: Final = tuple(f"svc-{i}" for i in range(8))
COMPONENT_ENVIRONMENT: Final = "environment"
#: The agent-sandbox SandboxClaims ironflow creates (one per step).
COMPONENT_SANDBOX_CLAIM: Final = "sandbox-claim"
#: A sandbox session's pod (ironflow.k8s.sessions.pod_sessions), and its session id.
COMPONENT_SANDBOX_SESSION: Final = "sandbox-session"
LABEL_SESSION_ID: Final = "ironflow.io/session-id"
#: A session's HOME claim (ironflow.k8s.sessions.session_volumes), owned by its pod; a snapshot's id on its
#: VolumeSnapshot.
COMPONENT_SESSION_HOME: Final = "sandbox-session-home"
LABEL_SNAPSHOT_ID: Final = "ironflow.io/snapshot-id"
#: A local Docker session's container (ironflow.local.sessions.docker_runtime): its session directory
#: on the host, and the process that owns it (as ironflow.local.workdirs marks a directory).
LABEL_SESSION_DIR: Final = "ironflow.io/session-dir"
LABEL_OWNER: Final = "ironflow.io/owner"
#: The uid of the worker pod that created an object (ironflow.kube.owners): a restarted worker
#: (same pod, same uid) deletes what carries its own uid before it takes runs.
LABEL_WORKER_UID: Final = "ironflow.io/worker-uid"

#: Keys the agent-sandbox controllers own: ironflow reads them and refuses them in
#: caller labels, never writes them.
AGENT_SANDBOX_KEY_PREFIX: Final = "agents.x-k8s.io/"
#: On a warm-pool member and its pod until a claim adopts it (then the controllers remove it).
LABEL_WARM_POOL_SANDBOX: Final = AGENT_SANDBOX_KEY_PREFIX + "warm-pool-sandbox"
#: On a Sandbox: the name of its pod (a warm-pool member's pod keeps its own name).
ANNOTATION_SANDBOX_POD_NAME: Final = AGENT_SANDBOX_KEY_PREFIX + "pod-name"
#: On every Sandbox the controllers start: ``warm`` (a pool member, kept on adoption) or ``cold``.
LABEL_SANDBOX_LAUNCH_TYPE: Final = AGENT_SANDBOX_KEY_PREFIX + "launch-type"
#: NameHash(a Sandbox's name) on its pod and PVCs: an unowned PVC with it is adopted by that Sandbox only.
LABEL_SANDBOX_NAME_HASH: Final = AGENT_SANDBOX_KEY_PREFIX + "sandbox-name-hash"

#: Keys only ironflow sets: a caller label with one of them would hide an object from
#: the reaper or make it look like another component.
RESERVED_LABELS: Final = frozenset({LABEL_MANAGED_BY, LABEL_COMPONENT, LABEL_WORKER_UID})

MANAGED_SELECTOR: Final = f"{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"
RUNNER_SELECTOR: Final = f"{MANAGED_SELECTOR},{LABEL_COMPONENT}={COMPONENT_CLAUDE_RUNNER}"
PROMPT_SELECTOR: Final = f"{MANAGED_SELECTOR},{LABEL_COMPONENT}={COMPONENT_PROMPT_DATA}"
ENVIRONMENT_SELECTOR: Final = f"{MANAGED_SELECTOR},{LABEL_COMPONENT}={COMPONENT_ENVIRONMENT}"
SANDBOX_CLAIM_SELECTOR: Final = f"{MANAGED_SELECTOR},{LABEL_COMPONENT}={COMPONENT_SANDBOX_CLAIM}"
SESSION_HOME_SELECTOR: Final = f"{MANAGED_SELECTOR},{LABEL_COMPONENT}={COMPONENT_SESSION_HOME}"
SANDBOX_SESSION_SELECTOR: Final = f"{MANAGED_SELECTOR},{LABEL_COMPONENT}={COMPONENT_SANDBOX_SESSION}"

_MAX_LABEL_VALUE: Final = 63
_HASH_SUFFIX_LEN: Final = 9  # "-" + 8 hex digits
_ALLOWED = re.compile(r"[A-Za-z0-9._-]")
_VALID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_reserved_label(key: str) -> bool:
    return key in RESERVED_LABELS


def reserved_label_message(key: str) -> str:
    return f"pod label '{key}' is reserved: ironflow sets it on every object it creates"


def is_valid_label_value(value: str) -> bool:
    """A non-empty Kubernetes label value (the empty value, valid for the API, is refused)."""
    return len(value.encode()) <= _MAX_LABEL_VALUE and _VALID.fullmatch(value) is not None


def is_dns_label(value: str) -> bool:
    """An RFC 1123 DNS label: what namespaces, container and most object names must be (1-63 chars)."""
    return _DNS_LABEL.fullmatch(value) is not None


def is_dns_subdomain(value: str) -> bool:
    """An RFC 1123 DNS subdomain: what Secret, ConfigMap, PVC, ServiceAccount and RuntimeClass
    names must be (dot-separated DNS labels, 1-253 chars)."""
    return len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value) is not None


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key, or None: an optional DNS-subdomain prefix and
    ``/``, then a name of 1-63 characters ``[A-Za-z0-9._-]`` that begins and ends alphanumeric.

    >>> label_key_problem("team"), label_key_problem("example.com/team")
    (None, None)
    >>> label_key_problem("bad key")
    "label key 'bad key' is not valid: the name must be 1-63 characters [A-Za-z0-9._-], alphanumeric at both ends"
    """
    prefix, slash, name = key.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return f"label key '{key}' is not valid: its prefix must be a DNS subdomain (lowercase, 1-253 characters)"
    if len(name) > _MAX_LABEL_VALUE or _VALID.fullmatch(name) is None:
        rule = "the name must be 1-63 characters [A-Za-z0-9._-], alphanumeric at both ends"
        return f"label key '{key}' is not valid: {rule}"
    return None


def label_value_problem(key: str, value: str) -> str | None:
    """Why ``value`` cannot be the value of label ``key``, or None (empty, or what
    :func:`is_valid_label_value` accepts)."""
    if value == "" or is_valid_label_value(value):
        return None
    return f"label '{key}' value {value!r} is not valid: up to 63 characters [A-Za-z0-9._-], alphanumeric at both ends"


def _fnv1a_32(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h ^= byte
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def sanitize_label_value(raw: str) -> str:
    """Turn any string into a valid label value; a valid one is returned unchanged.

    An altered value gets ``-`` and the FNV-1a hash of the original, so two names that
    map to the same characters still get different labels.

    >>> sanitize_label_value("review")
    'review'
    >>> sanitize_label_value("fix bug/42")
    'fix-bug-42-b8a85051'
    """
    if is_valid_label_value(raw):
        return raw
    mapped = "".join(c if _ALLOWED.fullmatch(c) else "-" for c in raw)
    # Only ASCII survives the mapping, so byte and char truncation agree.
    mapped = mapped[: _MAX_LABEL_VALUE - _HASH_SUFFIX_LEN]
    start, end = 0, len(mapped)
    while start < end and not mapped[start].isalnum():
        start += 1
    while end > start and not mapped[end - 1].isalnum():
        end -= 1
    base = mapped[start:end] or "unnamed"
    return f"{base}-{_fnv1a_32(raw.encode()):08x}"


def selector(base: str, pairs: Mapping[str, str]) -> str:
    """``base`` plus one ``key=value`` term per pair, in order."""
    return ",".join([base, *(f"{k}={v}" for k, v in pairs.items())])


def expires_at(annotations: Mapping[str, str] | None) -> int | None:
    """The expiry of an object, or None when absent or unparseable (never reaped then)."""
    raw = (annotations or {}).get(ANNOTATION_EXPIRES_AT)
    if raw is None or not (raw.isascii() and raw.isdigit()):  # "²".isdigit() is True; int() refuses it
        return None
    return int(raw)


def scope_labels(*, run_id: str, step: str, root_run_id: str | None = None) -> dict[str, str]:
    """The §2 labels of a step's objects, each value sanitised by the one rule (a valid value,
    such as a UUIDv7 run id, is kept as it is).

    >>> scope_labels(run_id="r1", step="fix bug")
    {'ironflow.io/run-id': 'r1', 'ironflow.io/step': 'fix-bug-ab32c9e2'}
    """
    out = {LABEL_RUN_ID: sanitize_label_value(run_id), LABEL_STEP: sanitize_label_value(step)}
    if root_run_id is not None:
        out[LABEL_ROOT_RUN_ID] = sanitize_label_value(root_run_id)
    return out
