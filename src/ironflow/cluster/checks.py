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
                        no value holds ``sk-ant`` anywhere (render's own test)
no SA token             no projected service-account token volume or mount           pod spec
labels and expiry       run-id and step labels (root-run-id valid when set, as       pod spec
                        ``AgentConfig.scoped`` renders none), a numeric expires-at
no Claude credential    (auth proxy) no credential variable at all in the pod        pod spec
worker and policies     a SubjectAccessReview says the worker cannot create          API
                        NetworkPolicies in the agent namespace
proxy refuses tokens    (auth proxy) an unknown token gets 401                       HTTP
exec probes             SA token directory absent, root mounted read-only and        exec
                        ``touch`` under it refused, egress outside the profile
                        fails, (auth proxy) ``env`` holds no ``sk-ant``, and the
                        proxy the pod is given answers 401 to an unknown token
                        sent from inside the pod
======================  ==========================================================  =========

The exec probes run a POSIX ``sh`` script in each Running agent pod (``pods/exec``) that
always exits 0 and prints one ``key=value`` line per fact: the decision is made here, from
the words, never from an exit code (which some runtimes do not report), and never from an
environment value (the env probe prints a count). A probe that could not run (exec
denied, the pod gone, no ``sh``, no HTTP client for egress) is skipped, never passed.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from ironflow import labels, secrets
from ironflow.claude import layout

__all__ = [
    "CREDENTIAL_ENV",
    "EGRESS_PROBE_URL",
    "EXEC_PROBES",
    "SA_TOKEN_DIR",
    "UNKNOWN_TOKEN",
    "CheckResult",
    "ExecProbe",
    "Outcome",
    "ProbeRun",
    "all_passed",
    "check_labels_and_expiry",
    "check_no_claude_credential",
    "check_no_service_account_token",
    "check_pods",
    "check_proxy_refuses_unknown_token",
    "check_secrets_by_reference",
    "check_security_context",
    "check_worker_cannot_create_networkpolicies",
    "decide_exec_probe",
    "exec_probes",
    "exec_probes_skipped",
    "probe_command",
    "running_pods",
    "subject_access_review",
]

SA_TOKEN_DIR: Final = layout.SERVICE_ACCOUNT_TOKEN_DIR
#: Variables that carry a Claude credential: only ever by secretKeyRef, and not at all with a proxy.
CREDENTIAL_ENV: Final = ("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY", layout.CREDENTIALS_ENV)
_PROXY_TOKEN_PREFIX: Final = "ifap_"  # noqa: S105 - a prefix, not a token
#: Not a credential: a token no proxy ever issued, so the proxy must answer 401.
UNKNOWN_TOKEN: Final = "ifap_ironflow-check-unknown"  # noqa: S105
#: Outside every profile's allow-list: the egress probe must not reach it.
EGRESS_PROBE_URL: Final = "https://example.com"
_ROOT_PROBE_FILE: Final = "/usr/local/.ironflow-check-probe"

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
        why = "no agent pod to inspect: run a step (or pass --pod) and check again"
        return CheckResult(check, Outcome.SKIPPED, why)
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
        if secrets.looks_like_claude_credential(value):  # render's test: anywhere in the value, any case
            yield f"{where}: {var} holds a Claude key in clear text (use a secretKeyRef or the auth proxy)"
        elif var.upper() in CREDENTIAL_ENV and value:
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
            if key != labels.LABEL_ROOT_RUN_ID:  # optional: AgentConfig.scoped(run, step) renders none
                yield f"{_name(pod)}: no {key} label"
        elif not labels.is_valid_label_value(value):
            yield f"{_name(pod)}: {key} is not a valid label value"
    if labels.expires_at(meta.get("annotations")) is None:
        yield f"{_name(pod)}: no numeric {labels.ANNOTATION_EXPIRES_AT} annotation (the reaper would never delete it)"


def check_labels_and_expiry(pods: Sequence[Pod]) -> CheckResult:
    problems = [p for pod in pods for p in _label_problems(pod)]
    return _aggregate(
        "run/root/step labels and expiry", pods, problems, "{n} pod(s): run and step labels and expiry set"
    )


def _credential_problems(pod: Pod) -> Iterable[str]:
    for where, entry in _env(pod):
        var = str(entry.get("name", ""))
        if var.upper() in CREDENTIAL_ENV:
            yield f"{where}: {var} is set; with the auth proxy the pod must hold no Claude credential"
        value = entry.get("value")
        if isinstance(value, str) and secrets.looks_like_claude_credential(value):
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


# --- exec probes ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeRun:
    """One probe's exec in one pod: the exit code and stdout, or why the exec could not run."""

    pod: str
    exit_code: int | None = None
    stdout: str = ""
    error: str = ""


@dataclass(frozen=True)
class ExecProbe:
    """A probe: its row name, the ``sh`` script it runs, and the words that decide it.

    ``judge(facts)`` returns a problem (fail), ``None`` (pass), or raises :class:`_Unknown`
    for an answer that decides nothing (skipped).
    """

    name: str
    script: str
    judge: Callable[[Mapping[str, str]], str | None]
    ok: str


class _Unknown(Exception):
    """The probe answered, but not with something that decides the check."""


def _judge_token(facts: Mapping[str, str]) -> str | None:
    state = facts.get("sa-token")
    if state == "absent":
        return None
    if state == "present":
        return f"{SA_TOKEN_DIR} exists (a service-account token is mounted)"
    raise _Unknown("no sa-token answer")


def _judge_root(facts: Mapping[str, str]) -> str | None:
    touch, root = facts.get("touch"), facts.get("root")
    if touch == "ok":
        return f"touch {_ROOT_PROBE_FILE} succeeded: the root filesystem is writable"
    if touch != "refused":
        raise _Unknown("no touch answer")
    if root and root.split(",")[0] == "rw":
        return "/ is mounted read-write (touch failed only for lack of permission)"
    return None


def _judge_egress(facts: Mapping[str, str]) -> str | None:
    state = facts.get("egress")
    if state == "blocked":
        return None
    if state == "open":
        return "the probe URL answered: egress is not limited to the profile"
    if state == "no-client":
        raise _Unknown("neither curl nor wget in the image")
    raise _Unknown("no egress answer")


def _judge_env(facts: Mapping[str, str]) -> str | None:
    count = facts.get("sk-ant", "")
    if not count.isdigit():
        raise _Unknown("no sk-ant count")
    if int(count) == 0:
        return None
    return f"{count} environment variable(s) contain sk-ant"


def _judge_proxy(facts: Mapping[str, str]) -> str | None:
    state = facts.get("proxy", "")
    if state == "401":
        return None
    if state == "no-url":
        return "the pod has no ANTHROPIC_BASE_URL: it is not pointed at the auth proxy"
    if state == "no-client":
        raise _Unknown("no curl in the image")
    if state in ("", "000"):
        raise _Unknown("the proxy did not answer from the pod")
    return f"the proxy answered HTTP {state} to an unknown token from inside the pod, expected 401"


_PROXY_PROBE = ExecProbe(
    "proxy refuses an unknown token from the pod (exec)",
    'u="${ANTHROPIC_BASE_URL:-}"; if [ -z "$u" ]; then echo proxy=no-url;'
    " elif command -v curl >/dev/null 2>&1; then"
    f" c=$(curl -s -o /dev/null -w '%{{http_code}}' -m 5 -H 'Authorization: Bearer {UNKNOWN_TOKEN}'"
    ' -H \'anthropic-version: 2023-06-01\' "$u/v1/messages" 2>/dev/null); echo "proxy=${c:-000}";'
    " else echo proxy=no-client; fi",
    _judge_proxy,
    "{n} pod(s): the proxy answers 401 to an unknown token",
)

EXEC_PROBES: Final = (
    ExecProbe(
        "SA token directory absent (exec)",
        f"if [ -e {SA_TOKEN_DIR} ]; then echo sa-token=present; else echo sa-token=absent; fi",
        _judge_token,
        "{n} pod(s): no service-account token directory",
    ),
    ExecProbe(
        "root filesystem read-only (exec)",
        'root=; while read -r _dev mnt _fs opts _rest; do [ "$mnt" = / ] && root=$opts; done < /proc/self/mounts;'
        ' echo "root=$root";'
        f" if touch {_ROOT_PROBE_FILE} 2>/dev/null; then rm -f {_ROOT_PROBE_FILE}; echo touch=ok;"
        " else echo touch=refused; fi",
        _judge_root,
        "{n} pod(s): / mounted read-only, touch refused",
    ),
    ExecProbe(
        "egress limited to the profile (exec)",
        "if command -v curl >/dev/null 2>&1; then"
        " if curl -sS -o /dev/null -m 5 {url} 2>/dev/null; then echo egress=open;"
        " else echo egress=blocked; fi;"
        " elif command -v wget >/dev/null 2>&1; then"
        " if wget -q -T 5 -O /dev/null {url} 2>/dev/null; then echo egress=open;"
        " else echo egress=blocked; fi;"
        " else echo egress=no-client; fi",
        _judge_egress,
        "{n} pod(s): the probe URL is unreachable",
    ),
    ExecProbe(
        "no sk-ant in the pod env (exec)",
        'n=$(env | grep -ci sk-ant); echo "sk-ant=${n:-0}"',  # any case: render refuses SK-ANT too
        _judge_env,
        "{n} pod(s): no variable contains sk-ant",
    ),
    _PROXY_PROBE,
)


def probe_command(probe: ExecProbe, *, egress_url: str = EGRESS_PROBE_URL) -> tuple[str, ...]:
    """The argv exec runs: ``sh -c <script>`` (the script always exits 0); ``egress_url`` is
    the address the egress probe must fail to reach (one outside every profile)."""
    return ("sh", "-c", probe.script.replace("{url}", shlex.quote(egress_url)))


def running_pods(pods: Sequence[Pod]) -> list[Pod]:
    """The pods an exec can reach: phase Running and not being deleted."""
    return [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running" and not p.get("metadata", {}).get("deletionTimestamp")
    ]


def _facts(stdout: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep:
            out[key] = value
    return out


def decide_exec_probe(probe: ExecProbe, runs: Sequence[ProbeRun], *, no_pod: str = "") -> CheckResult:
    """Fail on any pod's problem; pass only if every pod answered and none had one; else skip."""
    if not runs:
        why = no_pod or "no Running agent pod to exec into: check while a step runs (or pass --pod)"
        return CheckResult(probe.name, Outcome.SKIPPED, why)
    problems: list[str] = []
    unknown: list[str] = []
    for run in runs:
        if run.error:
            unknown.append(f"{run.pod}: {run.error}")
        elif run.exit_code != 0:
            unknown.append(f"{run.pod}: the probe exited {run.exit_code} (is there a POSIX sh?)")
        else:
            try:
                problem = probe.judge(_facts(run.stdout))
            except _Unknown as exc:
                unknown.append(f"{run.pod}: {exc}")
            else:
                if problem is not None:
                    problems.append(f"{run.pod}: {problem}")
    if problems:
        return CheckResult(probe.name, Outcome.FAIL, "; ".join(problems))
    if unknown:
        return CheckResult(probe.name, Outcome.SKIPPED, "; ".join(unknown))
    return CheckResult(probe.name, Outcome.PASS, probe.ok.format(n=len(runs)))


def exec_probes(*, auth_proxy: bool) -> tuple[ExecProbe, ...]:
    """The probes to run: the ``sk-ant`` env probe and the proxy's 401 from inside the pod only
    with the auth proxy, as in the seed (without it the pod holds its credential by
    secretKeyRef, and an OAuth token starts with ``sk-ant`` by design)."""
    return EXEC_PROBES if auth_proxy else EXEC_PROBES[:3]


def exec_probes_skipped(why: str = "", *, auth_proxy: bool = True) -> list[CheckResult]:
    """Every probe as skipped, with ``why`` (e.g. exec is not allowed): reported, never faked."""
    return [decide_exec_probe(probe, (), no_pod=why) for probe in exec_probes(auth_proxy=auth_proxy)]


def all_passed(results: Iterable[CheckResult]) -> bool:
    """Exit 0 only on this: every check ran and passed (a skipped probe is not a pass)."""
    return all(r.outcome is Outcome.PASS for r in results)
