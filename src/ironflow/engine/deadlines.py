"""A run's absolute deadline, as pure decisions (reference engine 4.0).

``RunRecord.deadline_at`` is stored with the run, so it holds across resumes; the runner asks
:func:`seconds_left` before it starts a run and waits at most that long for the run's body, and
gives no agent step a bound past it (:func:`bounded`).
"""

from __future__ import annotations

import time
from typing import Final

from ironflow.engine import model
from ironflow.steps import AgentConfig

__all__ = ["MARGIN_S", "bounded", "seconds_left"]

#: How much longer than the run's remaining time an agent step's own bound is: the worker's deadline
#: fires first and names the run's deadline; the step's bound (a pod's ``activeDeadlineSeconds``)
#: still ends the sandbox soon after when the worker is gone.
MARGIN_S: Final = 5.0


def seconds_left(run: model.RunRecord, now: float | None = None) -> float | None:
    """Seconds until the run's deadline (0 or less: passed); None without one.

    >>> seconds_left(model.RunRecord("r", "w:f", None, deadline_at=100.0), now=40.0)
    60.0
    """
    if run.deadline_at is None:
        return None
    return run.deadline_at - (time.time() if now is None else now)


def bounded(config: AgentConfig, left: float | None) -> AgentConfig:
    """``config`` with its timeout no longer than the run's ``left`` seconds plus :data:`MARGIN_S`.

    >>> bounded(AgentConfig("x", timeout=3), 100).timeout, bounded(AgentConfig("x"), 100).timeout
    (3.0, 105.0)
    """
    if left is None:
        return config
    bound = max(left, 0.0) + MARGIN_S
    if config.timeout is not None and config.timeout <= bound:
        return config
    return config.with_timeout(bound)
