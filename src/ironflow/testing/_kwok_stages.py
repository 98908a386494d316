"""kwok Stages for :mod:`ironflow.testing.kubeenv`: how fake pods move from phase to phase.
Pure: stock stage documents in, kwok's ``--config`` YAML out; plus the CRI log format kwok serves.

The rule table (first match by weight; a stage of weight > 0 always beats weight 0):

=========================  ======  =====================================================
stage                      weight  applies to
=========================  ======  =====================================================
node-initialize/heartbeat  0       every Node (stock): Ready, addresses, kubelet port
pod-ready                  0       scheduled Pending pods -> Running (stock)
pod-delete                 0       pods with a deletionTimestamp -> deleted (stock), but
                                   not those deleted with no grace (the apiserver has)
pod-complete               0       Running pods owned by a Job -> Succeeded (stock)
ironflow-pod-exit          1000    Running pods labelled ``EXIT_CODE_LABEL``: after
                                   ``RUN_FOR_LABEL`` (a Go duration, default 100ms),
                                   Succeeded if the code is 0 else Failed, that exit code
ironflow-pod-deadline      1000    Running pods with ``activeDeadlineSeconds``, no exit
                                   label, not Job-owned: Failed/DeadlineExceeded, as a
                                   kubelet does (kwok enforces no deadline by itself)
ironflow-pod-waiting       1000    scheduled Pending pods labelled ``WAITING_REASON_LABEL``:
                                   their containers wait with that reason (a missing
                                   Secret, a bad image) and stay Pending, with a Warning
                                   event, as a kubelet reports a container it cannot start
=========================  ======  =====================================================

``EXIT_REASON_LABEL`` names the terminated reason of a failed exit (default ``Error``;
``OOMKilled`` as the kubelet writes for a container the kernel killed). pod-ready leaves pods
labelled ``WAITING_REASON_LABEL`` alone.

Why pod-delete skips a pod deleted with no grace: the apiserver removes it at once, and
kwok's delete is by name, with no UID. Before this, kwok, a little behind the watch, deleted
the next pod made under that name (a paused session's resumed pod). A kubelet deletes with
the pod's UID as a precondition.

Pods in namespaces starting with ``MANUAL_NAMESPACE_PREFIX`` are left to the test (only
pod-delete applies): the contract suite's kubelet control patches their status itself.
Those pods are kept unscheduled by a node selector no node matches, until the control binds
them; :func:`manual_namespace_policy` keeps the real scheduler from marking them
``Unschedulable`` meanwhile (a step fails fast on that reason), so in those namespaces the
test plays the scheduler's part too.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

__all__ = [
    "EXIT_CODE_LABEL",
    "EXIT_REASON_LABEL",
    "MANUAL_NAMESPACE_PREFIX",
    "RUN_FOR_LABEL",
    "WAITING_REASON_LABEL",
    "cri_log",
    "kwok_config",
    "manual_namespace_policy",
]

#: Pod label: the exit code the fake container ends with ("0" -> Succeeded, else Failed).
EXIT_CODE_LABEL: Final = "kubeenv.ironflow.io/exit-code"
#: Pod label: how long the fake container runs, as a Go duration ("200ms", "2s").
RUN_FOR_LABEL: Final = "kubeenv.ironflow.io/run-for"
#: Pod label: the terminated reason of a failed exit (``OOMKilled``; default ``Error``).
EXIT_REASON_LABEL: Final = "kubeenv.ironflow.io/exit-reason"
#: Pod label: the reason its containers wait with once scheduled (``CreateContainerConfigError``...).
WAITING_REASON_LABEL: Final = "kubeenv.ironflow.io/waiting-reason"
#: Namespaces whose pods kwok leaves alone (their "kubelet" is the test).
MANUAL_NAMESPACE_PREFIX: Final = "kubelet-manual-"

_NOT_MANUAL: Final = {
    "key": f'.metadata.namespace | startswith("{MANUAL_NAMESPACE_PREFIX}")',
    "operator": "NotIn",
    "values": ["true"],
}
_NO_EXIT_LABEL: Final = {"key": f'.metadata.labels["{EXIT_CODE_LABEL}"]', "operator": "DoesNotExist"}
_NO_WAITING_LABEL: Final = {"key": f'.metadata.labels["{WAITING_REASON_LABEL}"]', "operator": "DoesNotExist"}
_ALIVE: Final = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
#: Not a pod deleted with no grace: the apiserver removed it already (``| tostring``: kwok
#: compares its values as strings, and an absent field is ``"null"``).
_NOT_FORCED: Final = {"key": ".metadata.deletionGracePeriodSeconds | tostring", "operator": "NotIn", "values": ["0"]}
_RUNNING: Final = {"key": ".status.phase", "operator": "In", "values": ["Running"]}

_TERMINATED_TEMPLATE: Final = """{{{{ $now := Now }}}}
{{{{ $code := {code} }}}}
phase: {{{{ if eq $code "0" }}}}Succeeded{{{{ else }}}}Failed{{{{ end }}}}
{extra}conditions:
- {{type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{{{ $now | Quote }}}}}}
- {{type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{{{ $now | Quote }}}}}}
containerStatuses:
{{{{ range .spec.containers }}}}
- name: {{{{ .name | Quote }}}}
  image: {{{{ .image | Quote }}}}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: {{{{ $code }}}}
      reason: {{{{ if eq $code "0" }}}}Completed{{{{ else }}}}{reason}{{{{ end }}}}
      startedAt: {{{{ $now | Quote }}}}
      finishedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
"""


def _pod_stage(
    name: str, conditions: list[dict[str, Any]], delay_ms: int, delay_from: str, nxt: dict[str, Any]
) -> dict[str, Any]:
    """An ironflow pod Stage: a running, live pod in a kwok-driven namespace that also matches
    ``conditions`` ends after ``delay_from`` (else ``delay_ms``) as ``nxt`` says."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [_ALIVE, _RUNNING, _NOT_MANUAL, *conditions]},
            "weight": 1000,
            "delay": {"durationMilliseconds": delay_ms, "durationFrom": {"expressionFrom": delay_from}},
            "next": nxt,
        },
    }


#: The terminated reason of a failed exit: the pod's ``EXIT_REASON_LABEL``, else ``Error``.
_EXIT_REASON: Final = (
    f'{{{{ with index $.metadata.labels "{EXIT_REASON_LABEL}" }}}}{{{{ . }}}}{{{{ else }}}}Error{{{{ end }}}}'
)


def _exit_stage() -> dict[str, Any]:
    code = f'index .metadata.labels "{EXIT_CODE_LABEL}"'
    return _pod_stage(
        "ironflow-pod-exit",
        [{"key": f'.metadata.labels["{EXIT_CODE_LABEL}"]', "operator": "Exists"}],
        100,
        f'.metadata.labels["{RUN_FOR_LABEL}"]',
        {"statusTemplate": _TERMINATED_TEMPLATE.format(code=code, extra="", reason=_EXIT_REASON)},
    )


_WAITING_TEMPLATE: Final = """{{{{ $now := Now }}}}
{{{{ $reason := {reason} }}}}
phase: Pending
conditions:
- {{type: PodScheduled, status: "True", lastTransitionTime: {{{{ $now | Quote }}}}}}
- {{type: Ready, status: "False", reason: ContainersNotReady, lastTransitionTime: {{{{ $now | Quote }}}}}}
containerStatuses:
{{{{ range .spec.containers }}}}
- name: {{{{ .name | Quote }}}}
  image: {{{{ .image | Quote }}}}
  imageID: ""
  ready: false
  started: false
  restartCount: 0
  state:
    waiting:
      reason: {{{{ $reason | Quote }}}}
      message: {{{{ printf "{message}" $reason | Quote }}}}
{{{{ end }}}}
"""
#: What the waiting stage's containers and event say, ``%s`` the reason.
WAITING_MESSAGE: Final = "kwok stage ironflow-pod-waiting: the container waits with %s"


def _waiting_stage() -> dict[str, Any]:
    reason = f'index .metadata.labels "{WAITING_REASON_LABEL}"'
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "ironflow-pod-waiting"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    _ALIVE,
                    _NOT_MANUAL,
                    {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                    {"key": ".spec.nodeName", "operator": "Exists"},
                    {"key": f'.metadata.labels["{WAITING_REASON_LABEL}"]', "operator": "Exists"},
                    {"key": ".status.containerStatuses", "operator": "DoesNotExist"},
                ]
            },
            "weight": 1000,
            "delay": {"durationMilliseconds": 100},
            "next": {
                "event": {"type": "Warning", "reason": "Failed", "message": "Error: the container cannot start"},
                "statusTemplate": _WAITING_TEMPLATE.format(reason=reason, message=WAITING_MESSAGE),
            },
        },
    }


def _deadline_stage() -> dict[str, Any]:
    message = "Pod was active on the node longer than the specified deadline"
    extra = f'reason: DeadlineExceeded\nmessage: "{message}"\n'
    return _pod_stage(
        "ironflow-pod-deadline",
        [
            _NO_EXIT_LABEL,
            {"key": ".spec.activeDeadlineSeconds", "operator": "Exists"},
            {"key": ".metadata.ownerReferences.[].kind", "operator": "NotIn", "values": ["Job"]},
        ],
        1000,
        '(.spec.activeDeadlineSeconds | tostring) + "s"',
        {
            "event": {"type": "Normal", "reason": "DeadlineExceeded", "message": message},
            "statusTemplate": _TERMINATED_TEMPLATE.format(code='"137"', extra=extra, reason="DeadlineExceeded"),
        },
    )


def _scoped(stage: Mapping[str, Any]) -> dict[str, Any]:
    """A stock pod stage restricted as the table says: to non-manual namespaces (pod-delete
    to every namespace, but not to pods deleted with no grace; pod-complete also to unlabelled pods)."""
    out = copy.deepcopy(dict(stage))
    exprs = out["spec"].setdefault("selector", {}).setdefault("matchExpressions", [])
    if out["metadata"]["name"] == "pod-delete":
        exprs.append(dict(_NOT_FORCED))
        return out
    exprs.append(dict(_NOT_MANUAL))
    if out["metadata"]["name"] == "pod-complete":
        exprs.append(dict(_NO_EXIT_LABEL))
    if out["metadata"]["name"] == "pod-ready":
        exprs.append(dict(_NO_WAITING_LABEL))
    return out


def kwok_config(stock: Sequence[Mapping[str, Any]]) -> str:
    """kwok's ``--config`` document stream: the stock stages (node stages as shipped, pod
    stages scoped as the table says) plus the ironflow stages.

    >>> text = kwok_config([{"kind": "Stage", "metadata": {"name": "pod-ready"},
    ...                      "spec": {"resourceRef": {"kind": "Pod"}}}])
    >>> [d["metadata"]["name"] for d in yaml.safe_load_all(text)]
    ['pod-ready', 'ironflow-pod-exit', 'ironflow-pod-deadline', 'ironflow-pod-waiting']
    """
    docs: list[dict[str, Any]] = []
    for stage in stock:
        if stage.get("kind") != "Stage":
            continue
        is_pod = stage.get("spec", {}).get("resourceRef", {}).get("kind") == "Pod"
        docs.append(_scoped(stage) if is_pod else dict(stage))
    docs += [_exit_stage(), _deadline_stage(), _waiting_stage()]
    return yaml.safe_dump_all(docs, sort_keys=False)


def cri_log(text: str, *, stream: str = "stdout", at: datetime.datetime | None = None) -> str:
    """``text`` in the CRI log format kwok reads (one ``<time> <stream> F <line>`` per line).

    >>> cri_log("a\\nb\\n", at=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc))
    '2026-01-01T00:00:00.000000000Z stdout F a\\n2026-01-01T00:00:00.000000000Z stdout F b\\n'
    """
    when = (at or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    return "".join(f"{when} {stream} F {line}\n" for line in text.splitlines())


_POLICY: Final = "ironflow-kubeenv-manual-scheduling"


def manual_namespace_policy() -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding: in manual namespaces, a pod status that says
    ``PodScheduled=False, reason Unschedulable`` is refused (the scheduler retries, the pod
    stays Pending without a verdict until the control binds it)."""
    unschedulable = 'c.type == "PodScheduled" && c.status == "False" && c.reason == "Unschedulable"'
    allowed = f"!has(object.status.conditions) || !object.status.conditions.exists(c, {unschedulable})"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": _POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods/status"]}
                ]
            },
            "matchConditions": [
                {"name": "manual-namespace", "expression": f'request.namespace.startsWith("{MANUAL_NAMESPACE_PREFIX}")'}
            ],
            "validations": [
                {
                    "expression": allowed,
                    "message": "in a kubelet-manual namespace the test plays the scheduler's part",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": _POLICY},
        "spec": {"policyName": _POLICY, "validationActions": ["Deny"]},
    }
    return [policy, binding]
