"""An agent-sandbox session's claim: on the warm pool, its expiry and shutdown time from the ttl,
the session's labels, and the session read back from them (a step's claim is no session)."""

from __future__ import annotations

import pytest

from ironflow import errors, labels
from ironflow.agent_sandbox.claim_sessions import claim_info, session_claim
from ironflow.agent_sandbox.step_render import AgentSandboxSettings
from ironflow.k8s.pod_provider import K8sEphemeralProvider

SETTINGS = AgentSandboxSettings(K8sEphemeralProvider.sandboxed("runner:1").namespace("team"), warm_pool="warm")
SID = "sbx-0123456789abcdef"


def test_the_claim_takes_the_warm_pool_and_ends_at_the_ttl() -> None:
    claim = session_claim(SID, SETTINGS, ttl_s=600, now=1000.0, caller_labels={"team": "a"}, run_id="run-1")
    meta, spec = claim["metadata"], claim["spec"]
    assert (meta["name"], meta["namespace"]) == (SID, "team")
    assert spec["warmPoolRef"] == {"name": "warm"}
    assert spec["lifecycle"] == {"shutdownTime": "1970-01-01T00:26:40Z", "shutdownPolicy": "Delete"}
    assert meta["annotations"] == {labels.ANNOTATION_EXPIRES_AT: "1600"}
    assert meta["labels"][labels.LABEL_COMPONENT] == labels.COMPONENT_SANDBOX_CLAIM  # the claim reaper's
    meta["creationTimestamp"] = "1970-01-01T00:16:40Z"
    info = claim_info(claim)
    assert info is not None
    assert (info.id, info.backend, info.created_at, info.expires_at) == (SID, "agent-sandbox", 1000.0, 1600.0)
    assert (info.labels, info.run_id) == ({"team": "a"}, "run-1")


def test_a_steps_claim_or_one_being_deleted_is_no_session() -> None:
    claim = session_claim(SID, SETTINGS, ttl_s=60, now=0.0)
    step = {**claim, "metadata": {**claim["metadata"], "labels": {labels.LABEL_COMPONENT: "sandbox-claim"}}}
    assert claim_info(step) is None
    going = {**claim, "metadata": {**claim["metadata"], "deletionTimestamp": "1970-01-01T00:00:05Z"}}
    assert claim_info(going) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"caller_labels": {labels.LABEL_SESSION_ID: "x"}}, "set by ironflow"),
        ({"run_id": "not a label"}, "not a Kubernetes label value"),
        ({"ttl_s": -1.0}, "ttl must be greater than zero"),
    ],
)
def test_bad_input_is_one_config_error(kwargs: dict[str, object], message: str) -> None:
    options: dict[str, object] = {"ttl_s": 60.0, "now": 0.0, **kwargs}
    with pytest.raises(errors.ConfigError, match=message):
        session_claim(SID, SETTINGS, **options)  # type: ignore[arg-type]
