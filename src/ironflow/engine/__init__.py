"""Durable workflows of agent steps: plain async Python, runs kept in SQLite or PostgreSQL.

Layering (imports point down only): ``model``, ``retry`` (pure) → ``context`` (step
values, the ``ctx`` object) → ``events`` (what a worker reports; the observer protocol) →
``rows`` (pure) → ``store``, ``sqlite``, ``postgres`` (I/O adapters) → ``accounts``, ``loading``,
``transcripts`` (a step's stored output) → ``runner`` (one execution of a run) → ``worker``
(leases, concurrency) → ``metrics``, ``run_log`` (observers) → ``monitoring`` (the worker's
``/metrics`` and ``/healthz``) → ``cli/run.py``. Nothing here imports a provider implementation:
the runner sees only :class:`~ironflow.provider.AgentProvider`.
"""

from typing import TYPE_CHECKING

from ironflow._lazy import lazy_exports

if TYPE_CHECKING:
    from ironflow.engine.accounts import AccountPool, CredentialRef, ProviderAccount, choose_account
    from ironflow.engine.context import AgentStep, Context, OpStep, Step, SubWorkflowStep, Workflow
    from ironflow.engine.events import Outcome
    from ironflow.engine.loading import load_workflow, workflow_ref
    from ironflow.engine.model import RunRecord, RunStatus, StepKind, StepRecord, StepStatus, new_id, uuid7
    from ironflow.engine.retry import DEFAULT_RETRY, RetryPolicy, is_retryable
    from ironflow.engine.runner import Runner
    from ironflow.engine.store import Store, default_store_url, open_store
    from ironflow.engine.worker import Worker

__all__ = [
    "DEFAULT_RETRY",
    "AccountPool",
    "AgentStep",
    "Context",
    "CredentialRef",
    "OpStep",
    "Outcome",
    "ProviderAccount",
    "RetryPolicy",
    "RunRecord",
    "RunStatus",
    "Runner",
    "Step",
    "StepKind",
    "StepRecord",
    "StepStatus",
    "Store",
    "SubWorkflowStep",
    "Worker",
    "Workflow",
    "choose_account",
    "default_store_url",
    "is_retryable",
    "load_workflow",
    "new_id",
    "open_store",
    "uuid7",
    "workflow_ref",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "accounts": ("AccountPool", "CredentialRef", "ProviderAccount", "choose_account"),
        "context": ("AgentStep", "Context", "OpStep", "Step", "SubWorkflowStep", "Workflow"),
        "loading": ("load_workflow", "workflow_ref"),
        "model": ("RunRecord", "RunStatus", "StepKind", "StepRecord", "StepStatus", "new_id", "uuid7"),
        "retry": ("DEFAULT_RETRY", "RetryPolicy", "is_retryable"),
        "events": ("Outcome",),
        "runner": ("Runner",),
        "store": ("Store", "default_store_url", "open_store"),
        "worker": ("Worker",),
    },
)
