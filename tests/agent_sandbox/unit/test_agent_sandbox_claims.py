"""Pure claim decisions: selectors of a run and a step, reaping by expiry, conditions."""

from __future__ import annotations

from typing import Any

from ironflow import labels
from ironflow.agent_sandbox import claims
from ironflow.steps import StepScope


def claim(expires: str | None, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c"}
    if expires is not None:
        meta["annotations"] = {labels.ANNOTATION_EXPIRES_AT: expires}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def test_a_claim_is_reaped_only_strictly_after_its_expiry() -> None:
    assert claims.claim_reap_reason(claim("100"), 100) is None
    assert claims.claim_reap_reason(claim("100"), 101) == "Expired"


def test_claims_without_a_parseable_expiry_or_already_going_are_kept() -> None:
    assert claims.claim_reap_reason(claim(None), 10**12) is None
    assert claims.claim_reap_reason(claim("soon"), 10**12) is None
    assert claims.claim_reap_reason(claim("1", deleting=True), 10**12) is None


def test_run_selectors_cover_the_run_and_its_children_with_sanitised_values() -> None:
    run, root = claims.run_claim_selectors("fix bug/42")
    value = labels.sanitize_label_value("fix bug/42")
    assert run == f"{labels.SANDBOX_CLAIM_SELECTOR},{labels.LABEL_RUN_ID}={value}"
    assert root == f"{labels.SANDBOX_CLAIM_SELECTOR},{labels.LABEL_ROOT_RUN_ID}={value}"


def test_step_selector_names_the_scopes_run_and_step_not_its_root() -> None:
    assert claims.step_claim_selector(StepScope("r", "s", root_run_id="top")) == (
        "app.kubernetes.io/managed-by=ironflow,app.kubernetes.io/component=sandbox-claim,"
        "ironflow.io/run-id=r,ironflow.io/step=s"
    )


def test_step_selector_matches_the_labels_a_claim_of_that_scope_carries() -> None:
    scope = StepScope("fix bug/42", "review code")
    selector = claims.step_claim_selector(scope)
    assert all(f"{k}={v}" in selector for k, v in scope.labels.items())


def test_condition_status_must_match_exactly() -> None:
    obj = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "SandboxNotReady"}]}}
    assert not claims.has_condition(obj, "Ready")
    assert claims.has_condition(obj, "Ready", "False")
    assert claims.condition(obj, "Ready") == obj["status"]["conditions"][0]


def test_resources_follow_the_api_version() -> None:
    beta, alpha = claims.resources("v1beta1"), claims.resources("v1alpha1")
    assert beta.claims.path("ns") == "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxclaims"
    assert alpha.sandboxes.path("ns", "x") == "/apis/agents.x-k8s.io/v1alpha1/namespaces/ns/sandboxes/x"
