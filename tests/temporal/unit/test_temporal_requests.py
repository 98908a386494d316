"""Temporal ids map to ironflow's StepScope; requests round-trip as plain JSON values."""

from __future__ import annotations

import dataclasses
import json

import pytest
from temporalio.converter import DataConverter

from ironflow import errors, labels
from ironflow.prompts import Prompt
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig, StepScope
from ironflow.temporal import requests


def test_the_workflow_id_is_the_run_and_the_root_workflow_the_root_run() -> None:
    assert requests.step_scope(workflow_id="review-1.summarise", root_workflow_id="review-1", step="summary") == (
        StepScope(run_id="review-1.summarise", step="summary", root_run_id="review-1")
    )
    assert requests.step_scope(workflow_id="review-1", root_workflow_id=None, step="plan").root_run_id == "review-1"


def test_an_activity_outside_a_workflow_has_no_scope() -> None:
    with pytest.raises(errors.ConfigError, match="only inside a workflow"):
        requests.step_scope(workflow_id=None, root_workflow_id=None, step="plan")


def test_an_agent_request_survives_json_and_scopes_its_config_the_same_for_every_attempt() -> None:
    config = AgentConfig("Review it", model="haiku", max_turns=3).pod_label("team", "infra")
    request = requests.AgentRequest.of("review security", config, root_workflow_id="review-1")
    again = requests.AgentRequest(**json.loads(json.dumps(dataclasses.asdict(request))))
    scoped = again.agent_config("review-1.summarise")
    assert scoped.scope == StepScope("review-1.summarise", "review security", "review-1")
    assert dataclasses.replace(scoped, scope=None) == config
    assert scoped.scope is not None
    assert scoped.scope.labels == {
        labels.LABEL_RUN_ID: "review-1.summarise",
        labels.LABEL_STEP: labels.sanitize_label_value("review security"),
        labels.LABEL_ROOT_RUN_ID: "review-1",
    }
    assert again.agent_config("review-1.summarise") == scoped


def test_an_agent_request_carries_the_steps_timeout_to_the_activitys_provider() -> None:
    request = requests.AgentRequest.of("plan", AgentConfig("Plan it").with_timeout(3), root_workflow_id=None)
    again = requests.AgentRequest(**json.loads(json.dumps(dataclasses.asdict(request))))
    assert again.agent_config("run-1").timeout == 3.0


def test_a_command_request_needs_an_argv_of_strings() -> None:
    with pytest.raises(errors.StepConfigError, match="'lint' needs a non-empty argv"):
        requests.CommandRequest("lint", [])


def test_a_secret_block_travels_beside_the_config_and_comes_back_for_redaction() -> None:
    """``to_dict`` leaves the secret values out (as the engine's store does); the request carries
    them as ``Secret`` values, which Temporal's default converter refuses to write at all, so only
    the sealing converter can carry the request (the workflow checks it first)."""
    config = Prompt("Summarise.").untrusted("issue", Secret("PRIVATE-ISSUE-BODY")).config()
    request = requests.AgentRequest.of("summary", config, root_workflow_id="r")
    assert request.needs_sealing()
    assert "secret_values" not in request.config
    assert "PRIVATE-ISSUE-BODY" not in repr(request)
    scoped = request.agent_config("r")
    assert [v.reveal() for v in scoped.secret_values] == ["PRIVATE-ISSUE-BODY"]
    assert scoped.prompt == config.prompt
    with pytest.raises(TypeError):
        DataConverter.default.payload_converter.to_payload(request)
    plain = Prompt("Summarise.").untrusted("issue", "public body").config()
    public = requests.AgentRequest.of("summary", plain, root_workflow_id="r")
    assert not public.needs_sealing()
    assert "public body" in public.config["prompt"]
    assert DataConverter.default.payload_converter.to_payload(public).data  # the default converter writes it
