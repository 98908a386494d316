"""Cancel and retry a run as a person asks for it: ``ironflow runs cancel/retry`` and the UI's buttons.

The store's ``cancel_run`` and ``retry_run`` change whatever they are given; what a person may
ask is narrower, and both faces must refuse the same things with the same words
(:func:`refusal`, pure): a sub-workflow's run is changed through its root run, a finished run
has nothing to cancel, and only a failed or cancelled run is retried.
"""

from __future__ import annotations

from enum import StrEnum

from ironflow import errors
from ironflow.engine import model
from ironflow.engine.store import Store

__all__ = ["RunAction", "change_run", "refusal"]


class RunAction(StrEnum):
    CANCEL = "cancel"
    RETRY = "retry"


_RETRYABLE_STATES = (model.RunStatus.FAILED, model.RunStatus.CANCELLED)


def refusal(run: model.RunRecord, action: RunAction) -> str | None:
    """Why ``action`` cannot be applied to ``run`` (one line naming the fix), or None when it can."""
    if run.parent_run_id is not None:
        return f"run {run.id} is a sub-workflow run; {action} its root run {run.root_run_id} instead"
    if action is RunAction.CANCEL and run.finished:
        return f"run {run.id} already {run.status}; nothing to cancel"
    if action is RunAction.RETRY and run.status not in _RETRYABLE_STATES:
        return f"run {run.id} is {run.status}; only failed or cancelled runs can be retried"
    return None


async def change_run(store: Store, run: model.RunRecord, action: RunAction) -> model.RunRecord:
    """Apply ``action`` to ``run`` in ``store``; the run as it is now.

    Raises:
        RunStateConflict: the run's state refuses the change (:func:`refusal`), or the run is gone.
    """
    why = refusal(run, action)
    if why is not None:
        raise errors.RunStateConflict(why)
    changed = await (store.cancel_run(run.id) if action is RunAction.CANCEL else store.retry_run(run.id))
    if changed is None:
        raise errors.RunStateConflict(f"run {run.id} is no longer in the store")
    return changed
