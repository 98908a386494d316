"""What a workflow hands an ironflow activity, and the ``StepScope`` it maps to (pure).

Temporal's ids map to ironflow's run identity so labels, expiry and the reaper work as with
the built-in engine:

| ironflow                  | Temporal                                                      |
|---------------------------|---------------------------------------------------------------|
| run id (``run-id`` label) | the workflow id: stable across the workflow's retries, resets |
|                           | and continue-as-new, so a new run of it releases the old one  |
| root run id               | the root workflow's id (a child workflow's top workflow)      |
| step                      | the step name the workflow gives; one activity per step       |
| step attempt              | the activity attempt (Temporal's retry)                       |
| run execution             | the workflow run id (a reset or retry is a new execution)     |

The requests are plain dataclasses of JSON values (the config as :meth:`AgentConfig.to_dict`),
so they serialise with Temporal's default converter and read back the same in history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ironflow import errors
from ironflow.steps import AgentConfig, StepScope

__all__ = [
    "ACTIVITY_AGENT",
    "ACTIVITY_COMMAND",
    "ACTIVITY_RELEASE_RUN",
    "ACTIVITY_SESSION",
    "AgentRequest",
    "CommandRequest",
    "ReleaseRequest",
    "SessionRequest",
    "step_scope",
]

#: An activity's input is stored in the workflow's history: a secret untrusted block would sit there in clear.
_IN_HISTORY_REFUSED: Final = (
    "step {step!r}: its prompt holds a secret untrusted block, which Temporal would keep in the workflow's "
    "history in clear; run the step on the ironflow engine, or pass the text as a plain str"
)

#: The activity names a workflow calls by (so workflow code never imports the activities).
ACTIVITY_AGENT: Final = "ironflow.agent"
ACTIVITY_COMMAND: Final = "ironflow.command"
ACTIVITY_RELEASE_RUN: Final = "ironflow.release_run"
ACTIVITY_SESSION: Final = "ironflow.session"


def step_scope(*, workflow_id: str | None, root_workflow_id: str | None, step: str) -> StepScope:
    """The step's scope: the workflow id is the run, the root workflow's id the root run.

    >>> step_scope(workflow_id="review-42", root_workflow_id=None, step="plan")
    StepScope(run_id='review-42', step='plan', root_run_id='review-42')

    Raises:
        ConfigError: no workflow id (an activity started outside a workflow).
    """
    if not workflow_id:
        raise errors.ConfigError("an ironflow activity runs only inside a workflow: it has no workflow id")
    return StepScope(run_id=workflow_id, step=step, root_run_id=root_workflow_id or workflow_id)


@dataclass(frozen=True)
class AgentRequest:
    """One agent step: its name, its root workflow's id and the ``AgentConfig`` as a dict."""

    step: str
    config: dict[str, Any]
    root_workflow_id: str | None = None

    @classmethod
    def of(cls, step: str, config: AgentConfig, *, root_workflow_id: str | None) -> AgentRequest:
        """The request for ``config``; refused when it holds secret text, which the activity's input
        would carry into the workflow's history in clear.

        Raises:
            StepConfigError: ``config.secret_values`` is set (a ``Prompt`` with a secret block).
        """
        if config.secret_values:
            raise errors.StepConfigError(_IN_HISTORY_REFUSED.format(step=step))
        return cls(step=step, config=config.to_dict(), root_workflow_id=root_workflow_id)

    def agent_config(self, workflow_id: str | None) -> AgentConfig:
        """The config scoped to its run and step (the same for every attempt: same labels)."""
        scope = step_scope(workflow_id=workflow_id, root_workflow_id=self.root_workflow_id, step=self.step)
        return AgentConfig.from_dict(self.config).scoped(scope.run_id, scope.step, root_run_id=scope.root_run_id)


@dataclass(frozen=True)
class CommandRequest:
    """A plain command in a sandbox without network: argv, env (plain values only), timeout."""

    step: str
    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    root_workflow_id: str | None = None

    def __post_init__(self) -> None:
        if not self.argv or not all(isinstance(a, str) for a in self.argv):
            raise errors.StepConfigError(f"command step {self.step!r} needs a non-empty argv of strings")


@dataclass(frozen=True)
class SessionRequest:
    """A sandbox session as one step: files written, commands run in order in the same sandbox
    (the first that fails ends the list unless ``keep_going``), files read back, the session closed."""

    step: str
    commands: list[list[str]]
    files: Mapping[str, str] = field(default_factory=dict)
    read: list[str] = field(default_factory=list)
    timeout_s: float | None = None
    keep_going: bool = False
    root_workflow_id: str | None = None

    def __post_init__(self) -> None:
        if not self.commands or not all(argv and all(isinstance(a, str) for a in argv) for argv in self.commands):
            raise errors.StepConfigError(f"session step {self.step!r} needs commands, each a non-empty argv of strings")


@dataclass(frozen=True)
class ReleaseRequest:
    """Release everything of a run (the workflow id), before an execution of it or after a cancel."""

    run_id: str
