"""A Temporal worker that runs ironflow workflows and activities on one provider.

Workflow files are loaded by path (``examples/temporal/review.py``) or module name
(``package.module``); every class of it that ``@workflow.defn`` marks is registered. The
workflow sandbox re-imports a workflow's modules for each run; ironflow's own modules are
pure values there (configs, results, the workflow-side context) and pass through, as does the
loaded workflow module, which is imported once under its own name.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from ironflow import errors
from ironflow.provider import AgentProvider
from ironflow.temporal.activities import IronflowActivities

__all__ = ["build_worker", "connect", "load_workflows"]


def _module_of(ref: str) -> Any:
    path = Path(ref)
    if ref.endswith(".py") or path.is_file():
        if not path.is_file():
            raise errors.ConfigError(f"workflow file {ref} does not exist")
        resolved = path.resolve()
        name = f"ironflow_temporal_workflows_{path.stem}_{hashlib.sha256(str(resolved).encode()).hexdigest()[:8]}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, resolved)
        if spec is None or spec.loader is None:
            raise errors.ConfigError(f"workflow file {ref} cannot be loaded as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # the sandbox passes it through by this name
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise errors.ConfigError(f"workflow file {ref} failed to load: {type(exc).__name__}: {exc}") from exc
        return module
    try:
        return importlib.import_module(ref)
    except ImportError as exc:
        raise errors.ConfigError(f"workflow module {ref} cannot be imported: {exc}") from exc


def load_workflows(ref: str) -> list[type]:
    """The ``@workflow.defn`` classes of a file or module.

    Raises:
        ConfigError: it cannot be loaded, or defines no workflow.
    """
    module = _module_of(ref)
    found = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and value.__module__ == module.__name__
        and getattr(value, "__temporal_workflow_definition", None) is not None
    ]
    if not found:
        raise errors.ConfigError(f"{ref} defines no @workflow.defn class")
    return found


async def connect(address: str, *, namespace: str = "default", data_converter: DataConverter | None = None) -> Client:
    """A client of the Temporal server at ``address`` (``host:port``); ``data_converter`` (the
    sealing one, :func:`ironflow.temporal.sealed_data_converter`) for its payloads, else Temporal's.

    Raises:
        InfrastructureError: no server answered there (exit 3 in the CLI).
    """
    try:
        return await Client.connect(
            address, namespace=namespace, data_converter=data_converter or DataConverter.default
        )
    except RuntimeError as exc:  # the SDK's core raises RuntimeError for a failed connection
        raise errors.InfrastructureError(f"cannot reach the Temporal server at {address}: {exc}") from exc


def build_worker(
    client: Client,
    *,
    task_queue: str,
    provider: AgentProvider,
    workflows: Sequence[type] = (),
    activities: IronflowActivities | None = None,
    more_activities: Sequence[Callable[..., Any]] = (),
    max_concurrent_activities: int = 16,
) -> Worker:
    """A worker for ``task_queue`` running ``workflows``, the ironflow activities on ``provider``
    and ``more_activities`` (the workflows' own, if any)."""
    modules = {"ironflow", *(w.__module__ for w in workflows)}
    # Temporal's workflow sandbox (deterministic replays), not a step's sandbox.
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*modules)
    workflow_runner = SandboxedWorkflowRunner(restrictions=restrictions)
    acts = activities or IronflowActivities(provider)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(workflows),
        activities=[*acts.all(), *more_activities],
        workflow_runner=workflow_runner,
        max_concurrent_activities=max_concurrent_activities,
    )
