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
so they serialise with Temporal's default converter and read back the same in history. The one
exception is an agent step's ``secret_values`` (the texts of its secret untrusted blocks, which
``to_dict`` leaves out as the engine's store does): they travel as ``Secret`` values, which only
the sealing converter writes, and it seals the whole input (:mod:`ironflow.temporal.sealing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ironflow import errors
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig, StepScope

__all__ = [
    "ACTIVITY_AGENT",
    "ACTIVITY_COMMAND",
    "ACTIVITY_RELEASE_RUN",
    "ACTIVITY_SESSION",
    "UNSEALED_REFUSED",
    "AgentRequest",
    "CommandRequest",
    "ReleaseRequest",
    "SessionRequest",
    "step_scope",
]

#: An activity's input is stored in the workflow's history: a secret untrusted block goes there only sealed.
UNSEALED_REFUSED: Final = (
    "step {step!r}: its prompt holds a secret untrusted block, which Temporal would keep in the workflow's "
    "history in clear; give the client and the worker ironflow.temporal.sealed_data_converter(key) "
    "(temporal-worker --sealing-key FILE), or run the step on the ironflow engine"
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
    """One agent step: its name, its root workflow's id, the ``AgentConfig`` as a dict and its
    ``secret_values`` (a request that has any must travel sealed: :meth:`needs_sealing`)."""

    step: str
    config: dict[str, Any] = field(repr=False)  # the rendered prompt holds any secret block's text
    root_workflow_id: str | None = None
    secret_values: tuple[Secret, ...] = ()

    @classmethod
    def of(cls, step: str, config: AgentConfig, *, root_workflow_id: str | None) -> AgentRequest:
        """The request for ``config``, its secret blocks' texts carried beside it as ``Secret`` values."""
        return cls(
            step=step,
            config=config.to_dict(),
            root_workflow_id=root_workflow_id,
            secret_values=tuple(config.secret_values),
        )

    def needs_sealing(self) -> bool:
        """True when the prompt holds a secret block: its rendered text is in ``config`` too."""
        return bool(self.secret_values)

    def agent_config(self, workflow_id: str | None) -> AgentConfig:
        """The config scoped to its run and step (the same for every attempt: same labels), its
        ``secret_values`` back in place for redaction."""
        scope = step_scope(workflow_id=workflow_id, root_workflow_id=self.root_workflow_id, step=self.step)
        config = AgentConfig.from_dict(self.config).scoped(scope.run_id, scope.step, root_run_id=scope.root_run_id)
        return config.replace(secret_values=tuple(self.secret_values)) if self.secret_values else config


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
