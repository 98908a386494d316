"""``ironflow.cluster.checks``: a pod the sandboxed provider renders passes every check, and each
check fails on the pod (or cluster answer) that breaks it, naming the pod and never a value."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from ironflow import errors, labels
from ironflow.cluster import checks
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.steps import AgentConfig
from ironflow.testing import assert_no_leaks

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
PROXY = "http://ironflow-auth-proxy.ironflow-system"
CLAUDE_KEY = "sk-ant-oat01-" + "x" * 40
STEP = AgentConfig("review").scoped("run-1", "review").pod_label(labels.LABEL_ROOT_RUN_ID, "run-1")


def _pod(*, proxy: bool = False) -> dict[str, Any]:
    provider = K8sEphemeralProvider.sandboxed(IMAGE).namespace("ironflow-agents")
    if proxy:
        return provider.auth_proxy(PROXY).manifests(STEP, now=1000, proxy_token="ifap_abc")[-1]
    return provider.oauth_token_from_secret("claude-oauth", "token").manifests(STEP, now=1000)[-1]


def _outcomes(results: list[checks.CheckResult]) -> dict[str, checks.Outcome]:
    return {r.check: r.outcome for r in results}


@pytest.mark.parametrize("proxy", [False, True])
def test_a_sandboxed_provider_pod_passes_every_pod_check(proxy: bool) -> None:
    results = checks.check_pods([_pod(proxy=proxy)], auth_proxy=proxy)
    assert len(results) == (5 if proxy else 4)
    assert all(r.outcome is checks.Outcome.PASS for r in results), results


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def _set_env(pod: dict[str, Any], name: str, value: str) -> None:
    env = [e for e in _container(pod)["env"] if e["name"] != name]
    _container(pod)["env"] = [*env, {"name": name, "value": value}]


Breaker = Callable[[dict[str, Any]], object]

BREAKERS: list[tuple[str, Breaker, str, str]] = [
    ("root uid", lambda p: p["spec"]["securityContext"].update(runAsUser=0), "security context", "runs as uid 0"),
    (
        "non-root off",
        lambda p: (
            p["spec"]["securityContext"].pop("runAsNonRoot"),
            _container(p)["securityContext"].pop("runAsNonRoot"),
        ),
        "security context",
        "runAsNonRoot is not true",
    ),
    (
        "writable root",
        lambda p: _container(p)["securityContext"].update(readOnlyRootFilesystem=False),
        "security context",
        "root filesystem is writable",
    ),
    (
        "escalation",
        lambda p: _container(p)["securityContext"].pop("allowPrivilegeEscalation"),
        "security context",
        "allowPrivilegeEscalation is not false",
    ),
    (
        "capabilities kept",
        lambda p: _container(p)["securityContext"].update(capabilities={"drop": ["NET_RAW"]}),
        "security context",
        "do not drop ALL",
    ),
    (
        "no seccomp",
        lambda p: (
            p["spec"]["securityContext"].pop("seccompProfile"),
            _container(p)["securityContext"].pop("seccompProfile"),
        ),
        "security context",
        "not RuntimeDefault",
    ),
    (
        "privileged",
        lambda p: _container(p)["securityContext"].update(privileged=True),
        "security context",
        "privileged",
    ),
    (
        "token in clear",
        lambda p: _set_env(p, "CLAUDE_CODE_OAUTH_TOKEN", "oauth-token-value"),
        "secrets by reference",
        "CLAUDE_CODE_OAUTH_TOKEN is a plain value",
    ),
    (
        "claude key anywhere",
        lambda p: _set_env(p, "SOME_VAR", CLAUDE_KEY),
        "secrets by reference",
        "SOME_VAR holds a Claude key",
    ),
    (
        "SA token projected",
        lambda p: p["spec"]["volumes"].append(
            {"name": "kube-api-access-x", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
        ),
        "no service-account token",
        "projects a service-account token",
    ),
    (
        "automount on",
        lambda p: p["spec"].pop("automountServiceAccountToken"),
        "no service-account token",
        "automountServiceAccountToken is not false",
    ),
    (
        "claude key after a word",
        lambda p: _set_env(p, "MY_VAR", "Bearer " + CLAUDE_KEY.upper()),
        "secrets by reference",
        "MY_VAR holds a Claude key",
    ),
    (
        "bad root run label",
        lambda p: p["metadata"]["labels"].update({labels.LABEL_ROOT_RUN_ID: "-not a label value-"}),
        "run/root/step labels and expiry",
        "ironflow.io/root-run-id is not a valid label value",
    ),
    (
        "no step label",
        lambda p: p["metadata"]["labels"].pop(labels.LABEL_STEP),
        "run/root/step labels and expiry",
        "no ironflow.io/step label",
    ),
    (
        "bad expiry",
        lambda p: p["metadata"]["annotations"].update({labels.ANNOTATION_EXPIRES_AT: "soon"}),
        "run/root/step labels and expiry",
        "no numeric ironflow.io/expires-at",
    ),
]


@pytest.mark.parametrize(("case", "breaker", "check", "fragment"), BREAKERS, ids=[b[0] for b in BREAKERS])
def test_each_check_fails_on_the_pod_that_breaks_it(case: str, breaker: Breaker, check: str, fragment: str) -> None:
    pod = copy.deepcopy(_pod())
    breaker(pod)
    results = {r.check: r for r in checks.check_pods([_pod(), pod], auth_proxy=False)}
    assert results[check].outcome is checks.Outcome.FAIL
    assert fragment in results[check].why
    assert pod["metadata"]["name"] in results[check].why
    others = [r for name, r in results.items() if name != check]
    assert all(r.outcome is checks.Outcome.PASS for r in others), others


@pytest.mark.parametrize(
    "breaker",
    [
        lambda p: p["spec"]["containers"][0]["env"].append(
            {"name": "CLAUDE_CODE_OAUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "c", "key": "t"}}}
        ),
        lambda p: _set_env(p, "NOTES", CLAUDE_KEY),
        lambda p: _set_env(p, "MY_VAR", "Bearer " + CLAUDE_KEY),
        lambda p: _container(p).update(envFrom=[{"secretRef": {"name": "claude"}}]),
    ],
    ids=["credential by reference", "claude key", "claude key after a word", "envFrom"],
)
def test_with_the_proxy_any_claude_credential_in_the_pod_fails(breaker: Breaker) -> None:
    pod = copy.deepcopy(_pod(proxy=True))
    breaker(pod)
    outcomes = _outcomes(checks.check_pods([pod], auth_proxy=True))
    assert outcomes["no Claude credential in the pod"] is checks.Outcome.FAIL


def test_check_refuses_every_value_render_refuses() -> None:
    """One test of a credential for both: what render refuses under the proxy, check fails."""
    value = "Bearer " + CLAUDE_KEY
    proxied = K8sEphemeralProvider.sandboxed(IMAGE).auth_proxy(PROXY).env("MY_VAR", value)
    with pytest.raises(errors.StepConfigError):
        proxied.manifests(STEP, now=1000, proxy_token="ifap_abc")
    for proxy in (False, True):
        pod = copy.deepcopy(_pod(proxy=proxy))
        _set_env(pod, "MY_VAR", value)
        results = checks.check_pods([pod], auth_proxy=proxy)
        assert not checks.all_passed(results)
        assert_no_leaks([CLAUDE_KEY], [(r.check, r.why) for r in results])


@pytest.mark.parametrize("proxy", [False, True])
def test_a_pod_of_a_scoped_step_passes_the_label_check(proxy: bool) -> None:
    """``AgentConfig.scoped(run, step)`` renders no root-run-id label (the seed's ``run_scope``
    sets none): the check accepts what the library renders."""
    provider = K8sEphemeralProvider.sandboxed(IMAGE).namespace("ironflow-agents")
    step = AgentConfig("review").scoped("run-1", "review")
    if proxy:
        pod = provider.auth_proxy(PROXY).manifests(step, now=1000, proxy_token="ifap_abc")[-1]
    else:
        pod = provider.oauth_token_from_secret("claude-oauth", "token").manifests(step, now=1000)[-1]
    assert labels.LABEL_ROOT_RUN_ID not in pod["metadata"]["labels"]
    results = checks.check_pods([pod], auth_proxy=proxy)
    assert checks.all_passed(results), results


def test_reasons_never_quote_a_secret_value() -> None:
    pod = copy.deepcopy(_pod())
    _set_env(pod, "CLAUDE_CODE_OAUTH_TOKEN", CLAUDE_KEY)
    _set_env(pod, "ANTHROPIC_AUTH_TOKEN", "plain-token-value-123")
    results = checks.check_pods([pod], auth_proxy=True)
    assert any(r.outcome is checks.Outcome.FAIL for r in results)
    assert_no_leaks([CLAUDE_KEY, "plain-token-value-123"], [(r.check, r.why) for r in results])


def test_no_pod_is_nothing_to_inspect_never_a_pass() -> None:
    results = checks.check_pods([], auth_proxy=False)
    assert {r.outcome for r in results} == {checks.Outcome.SKIPPED}
    assert "run a step (or pass --pod)" in results[0].why
    assert not checks.all_passed(results)


def test_subject_access_review_asks_about_the_worker_creating_networkpolicies() -> None:
    body = checks.subject_access_review(namespace="agents", service_account="w", service_account_namespace="wk")
    assert body["spec"]["user"] == "system:serviceaccount:wk:w"
    assert body["spec"]["resourceAttributes"] == {
        "namespace": "agents",
        "verb": "create",
        "group": "networking.k8s.io",
        "resource": "networkpolicies",
    }


@pytest.mark.parametrize(
    ("review", "outcome"),
    [
        ({"status": {"allowed": False}}, checks.Outcome.PASS),
        ({"status": {"allowed": True, "reason": "RBAC: allowed by RoleBinding x"}}, checks.Outcome.FAIL),
        ({"status": {}}, checks.Outcome.FAIL),
        (None, checks.Outcome.SKIPPED),
    ],
)
def test_networkpolicy_check_passes_only_on_an_explicit_no(
    review: dict[str, Any] | None, outcome: checks.Outcome
) -> None:
    assert checks.check_worker_cannot_create_networkpolicies(review).outcome is outcome


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(401, checks.Outcome.PASS), (200, checks.Outcome.FAIL), (403, checks.Outcome.FAIL), (None, checks.Outcome.FAIL)],
)
def test_proxy_check_passes_only_on_401(status: int | None, outcome: checks.Outcome) -> None:
    assert checks.check_proxy_refuses_unknown_token(status, error="ClientConnectorError").outcome is outcome


def test_exec_probes_not_run_are_skipped_never_passed() -> None:
    probes = checks.exec_probes_skipped("not run (--no-exec)")
    assert len(probes) == 5
    assert {p.outcome for p in probes} == {checks.Outcome.SKIPPED}
    assert all(p.why == "not run (--no-exec)" for p in probes)
    assert not checks.all_passed(probes)
