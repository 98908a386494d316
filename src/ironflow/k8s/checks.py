"""The checks of a live sandbox, as decisions over objects already fetched (pure).

``ironflow check`` fetches (the agent pods, a SubjectAccessReview answer, the auth
proxy's answer to an unknown token) and hands them here; each function returns one
:class:`CheckResult` with a reason a human can act on. Nothing here does I/O, and no
reason ever quotes an environment value: names only, so a leaked secret is not leaked
again into a terminal or a CI log.

======================  ==========================================================  =========
check                   passes when                                                 source
======================  ==========================================================  =========
security context        every agent pod: runAsNonRoot, uid not 0, seccomp            pod spec
                        RuntimeDefault, no privilege escalation, read-only root,
                        capabilities drop ALL, not privileged
secrets by reference    no Claude credential variable carries a plain ``value``;     pod spec
                        no value starts with ``sk-ant``
no SA token             no projected service-account token volume or mount           pod spec
labels and expiry       run-id, root-run-id and step labels, a numeric expires-at    pod spec
no Claude credential    (auth proxy) no credential variable at all in the pod        pod spec
worker and policies     a SubjectAccessReview says the worker cannot create          API
                        NetworkPolicies in the agent namespace
proxy refuses tokens    (auth proxy) an unknown token gets 401                       HTTP
exec probes             SA token directory absent, ``touch`` on / fails, egress      skipped
                        outside the profile fails, ``env`` holds no ``sk-ant``
======================  ==========================================================  =========

The exec probes need ``pods/exec``, which the API layer does not offer yet: they are
reported as skipped, never as passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from ironflow.claude import layout
from ironflow.k8s import labels

__all__ = [
    "CREDENTIAL_ENV",
    "EXEC_PROBES",
    "SA_TOKEN_DIR",
    "CheckResult",
    "Outcome",
    "all_passed",
    "check_labels_and_expiry",
    "check_no_claude_credential",
    "check_no_service_account_token",
    "check_pods",
    "check_proxy_refuses_unknown_token",
    "check_secrets_by_reference",
    "check_security_context",
    "check_worker_cannot_create_networkpolicies",
    "exec_probes_skipped",
    "subject_access_review",
]

SA_TOKEN_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"  # noqa: S105 - a path
#: Variables that carry a Claude credential: only ever by secretKeyRef, and not at all with a proxy.
CREDENTIAL_ENV: Final = ("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY", layout.CREDENTIALS_ENV)
_CLAUDE_KEY_PREFIX: Final = "sk-ant"
_PROXY_TOKEN_PREFIX: Final = "ifap_"  # noqa: S105 - a prefix, not a token
EXEC_PROBES: Final = (
    ("SA token directory absent (exec)", f"ls {SA_TOKEN_DIR}"),
    ("root filesystem read-only (exec)", "touch /usr/local/probe"),
    ("egress limited to the profile (exec)", "curl -sS -m 5 https://example.com"),
    ("no sk-ant in the pod env (exec)", "env | grep -c sk-ant"),
)

Pod = Mapping[str, Any]


class Outcome(StrEnum):
    PASS = "pass"  # noqa: S105 - an outcome name
    FAIL = "fail"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class CheckResult:
    check: str
    outcome: Outcome
    why: str


def _name(pod: Pod) -> str:
    return str(pod.get("metadata", {}).get("name", "?"))


def _containers(pod: Pod) -> list[Mapping[str, Any]]:
    spec = pod.get("spec", {})
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def _aggregate(check: str, pods: Sequence[Pod], problems: Iterable[str], ok: str) -> CheckResult:
    found = list(problems)
    if not pods:
        return CheckResult(check, Outcome.FAIL, "no agent pod to inspect: run a step (or pass --pod) and check again")
    if found:
        return CheckResult(check, Outcome.FAIL, "; ".join(found))
    return CheckResult(check, Outcome.PASS, ok.format(n=len(pods)))


def _security_problems(pod: Pod) -> Iterable[str]:
    spec = pod.get("spec", {})
    pod_ctx = spec.get("securityContext") or {}
    name = _name(pod)
    for container in _containers(pod):
        ctx = container.get("securityContext") or {}
        where = f"{name}/{container.get('name', '?')}"
        non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
        uid = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
        seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
        drops = (ctx.get("capabilities") or {}).get("drop") or []
        if non_root is not True:
            yield f"{where}: runAsNonRoot is not true"
        if uid == 0:
            yield f"{where}: runs as uid 0"
        if seccomp != "RuntimeDefault":
            yield f"{where}: seccompProfile is {seccomp or 'unset'}, not RuntimeDefault"
        if ctx.get("allowPrivilegeEscalation") is not False:
            yield f"{where}: allowPrivilegeEscalation is not false"
        if ctx.get("readOnlyRootFilesystem") is not True:
            yield f"{where}: root filesystem is writable (readOnlyRootFilesystem not true)"
        if "ALL" not in drops:
            yield f"{where}: capabilities do not drop ALL"
        if ctx.get("privileged") is True:
            yield f"{where}: privileged"


def check_security_context(pods: Sequence[Pod]) -> CheckResult:
    problems = [p for pod in pods for p in _security_problems(pod)]
    return _aggregate(
        "security context",
        pods,
        problems,
        "{n} pod(s): non-root, seccomp RuntimeDefault, read-only root, no privilege escalation, capabilities dropped",
    )


def _env(pod: Pod) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for container in _containers(pod):
        for entry in container.get("env") or []:
            yield f"{_name(pod)}/{container.get('name', '?')}", entry


def _secret_problems(pod: Pod) -> Iterable[str]:
    for where, entry in _env(pod):
        var = str(entry.get("name", ""))
        value = entry.get("value")
        if not isinstance(value, str):
            continue
        if value.startswith(_CLAUDE_KEY_PREFIX):
            yield f"{where}: {var} holds a Claude key in clear text (use a secretKeyRef or the auth proxy)"
        elif var in CREDENTIAL_ENV and value:
            yield f"{where}: {var} is a plain value, not a secretKeyRef"
        elif var == "ANTHROPIC_AUTH_TOKEN" and value and not value.startswith(_PROXY_TOKEN_PREFIX):
            yield f"{where}: ANTHROPIC_AUTH_TOKEN is a plain value that is not an auth proxy token"


def check_secrets_by_reference(pods: Sequence[Pod]) -> CheckResult:
    problems = [p for pod in pods for p in _secret_problems(pod)]
    return _aggregate("secrets by reference", pods, problems, "{n} pod(s): credentials only through secretKeyRef")


def _token_problems(pod: Pod) -> Iterable[str]:
    spec = pod.get("spec", {})
    for volume in spec.get("volumes") or []:
        sources = (volume.get("projected") or {}).get("sources") or []
        if any("serviceAccountToken" in s for s in sources):
            yield f"{_name(pod)}: volume {volume.get('name')} projects a service-account token"
    for container in _containers(pod):
        for mount in container.get("volumeMounts") or []:
            if str(mount.get("mountPath", "")).rstrip("/") == SA_TOKEN_DIR:
                yield f"{_name(pod)}/{container.get('name')}: mounts {SA_TOKEN_DIR}"
    if spec.get("automountServiceAccountToken") is not False and not spec.get("serviceAccountName"):
        yield f"{_name(pod)}: automountServiceAccountToken is not false"


def check_no_service_account_token(pods: Sequence[Pod]) -> CheckResult:
    problems = [p for pod in pods for p in _token_problems(pod)]
    return _aggregate("no service-account token", pods, problems, "{n} pod(s): no API token mounted")


def _label_problems(pod: Pod) -> Iterable[str]:
    meta = pod.get("metadata", {})
    pod_labels = meta.get("labels") or {}
    for key in (labels.LABEL_RUN_ID, labels.LABEL_ROOT_RUN_ID, labels.LABEL_STEP):
        value = pod_labels.get(key)
        if not value:
            yield f"{_name(pod)}: no {key} label"
        elif not labels.is_valid_label_value(value):
            yield f"{_name(pod)}: {key} is not a valid label value"
    if labels.expires_at(meta.get("annotations")) is None:
        yield f"{_name(pod)}: no numeric {labels.ANNOTATION_EXPIRES_AT} annotation (the reaper would never delete it)"


def check_labels_and_expiry(pods: Sequence[Pod]) -> CheckResult:
    problems = [p for pod in pods for p in _label_problems(pod)]
    return _aggregate(
        "run/root/step labels and expiry", pods, problems, "{n} pod(s): run, root run, step labels and expiry set"
    )


def _credential_problems(pod: Pod) -> Iterable[str]:
    for where, entry in _env(pod):
        var = str(entry.get("name", ""))
        if var in CREDENTIAL_ENV:
            yield f"{where}: {var} is set; with the auth proxy the pod must hold no Claude credential"
        value = entry.get("value")
        if isinstance(value, str) and value.startswith(_CLAUDE_KEY_PREFIX):
            yield f"{where}: {var} holds a Claude key"
    for container in _containers(pod):
        if container.get("envFrom"):
            yield f"{_name(pod)}/{container.get('name')}: envFrom imports variables the check cannot see"


def check_no_claude_credential(pods: Sequence[Pod]) -> CheckResult:
    problems = [p for pod in pods for p in _credential_problems(pod)]
    return _aggregate(
        "no Claude credential in the pod", pods, problems, "{n} pod(s): no credential variable; the proxy holds it"
    )


def check_pods(pods: Sequence[Pod], *, auth_proxy: bool) -> list[CheckResult]:
    """Every pod-spec check, in table order."""
    results = [
        check_security_context(pods),
        check_secrets_by_reference(pods),
        check_no_service_account_token(pods),
        check_labels_and_expiry(pods),
    ]
    if auth_proxy:
        results.append(check_no_claude_credential(pods))
    return results


def subject_access_review(*, namespace: str, service_account: str, service_account_namespace: str) -> dict[str, Any]:
    """The review ``kubectl auth can-i create networkpolicies --as=<worker>`` sends."""
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{service_account_namespace}:{service_account}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{service_account_namespace}"],
            "resourceAttributes": {
                "namespace": namespace,
                "verb": "create",
                "group": "networking.k8s.io",
                "resource": "networkpolicies",
            },
        },
    }


def check_worker_cannot_create_networkpolicies(
    review: Mapping[str, Any] | None, *, unavailable: str = ""
) -> CheckResult:
    """Pass only on an explicit ``allowed: false``; no answer is not a pass."""
    check = "worker cannot create networkpolicies"
    if review is None:
        return CheckResult(check, Outcome.SKIPPED, unavailable or "no SubjectAccessReview answer")
    status = review.get("status") or {}
    if status.get("allowed") is True:
        reason = status.get("reason") or "a Role or ClusterRole grants it"
        return CheckResult(check, Outcome.FAIL, f"the worker may create NetworkPolicies ({reason}): remove that grant")
    if status.get("allowed") is False:
        return CheckResult(check, Outcome.PASS, "SubjectAccessReview: not allowed")
    return CheckResult(check, Outcome.FAIL, "the SubjectAccessReview answer has no status.allowed")


def check_proxy_refuses_unknown_token(status: int | None, *, error: str = "") -> CheckResult:
    check = "auth proxy refuses an unknown token"
    if status is None:
        return CheckResult(check, Outcome.FAIL, f"the proxy did not answer: {error or 'no response'}")
    if status == 401:
        return CheckResult(check, Outcome.PASS, "401 for an unknown token")
    return CheckResult(check, Outcome.FAIL, f"got HTTP {status} for an unknown token, expected 401")


def exec_probes_skipped() -> list[CheckResult]:
    """The probes run inside a pod: reported, never faked, until the API layer offers exec."""
    return [
        CheckResult(name, Outcome.SKIPPED, f"needs exec (`{command}` in the pod); the API layer has no pods/exec yet")
        for name, command in EXEC_PROBES
    ]


def all_passed(results: Iterable[CheckResult]) -> bool:
    """Exit 0 only on this: every check ran and passed (a skipped probe is not a pass)."""
    return all(r.outcome is Outcome.PASS for r in results)
