"""ironflow steps on Temporal: activities that run a step on any provider, and the workflow side.

An optional extra (``pip install 'ironflow-sandbox[temporal]'``): nothing outside this package
imports ``temporalio``. It sits beside :mod:`ironflow.engine` (orchestration) and imports only
the provider protocol and the pure values below it, never the engine: Temporal keeps the
history, ironflow keeps the sandbox contract (docs/temporal.md).

* :mod:`~ironflow.temporal.requests`: what an activity is handed, and Temporal ids → ``StepScope`` (pure);
* :mod:`~ironflow.temporal.failures`: ironflow errors → ``ApplicationError`` (pure);
* :mod:`~ironflow.temporal.sealing`: secret untrusted blocks sealed in the history (the data converter);
* :mod:`~ironflow.temporal.activities`: the activities (I/O, on the worker);
* :mod:`~ironflow.temporal.workflow`: the workflow side (``async with run() as ctx``);
* :mod:`~ironflow.temporal.worker`: a worker over one provider, workflows loaded from a file.
"""

from ironflow.temporal.activities import IronflowActivities
from ironflow.temporal.failures import application_error
from ironflow.temporal.requests import AgentRequest, CommandRequest, ReleaseRequest, step_scope
from ironflow.temporal.sealing import data_converter as sealed_data_converter
from ironflow.temporal.sealing import new_key as new_sealing_key
from ironflow.temporal.worker import build_worker, load_workflows
from ironflow.temporal.workflow import DEFAULT_RETRY, AgentStep, CommandStep, RunContext, StepOptions, run

__all__ = [
    "DEFAULT_RETRY",
    "AgentRequest",
    "AgentStep",
    "CommandRequest",
    "CommandStep",
    "IronflowActivities",
    "ReleaseRequest",
    "RunContext",
    "StepOptions",
    "application_error",
    "build_worker",
    "load_workflows",
    "new_sealing_key",
    "run",
    "sealed_data_converter",
    "step_scope",
]
