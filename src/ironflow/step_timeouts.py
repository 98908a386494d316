"""How long an agent step may run: the smaller of the step's timeout and the provider's (pure).

Reference 6.0.0 bounds a step's duration independently of the provider: ``AgentConfig.timeout``
is the step's bound, the provider's setting (``LocalSandboxProvider(timeout=)``, the k8s
provider's ``timeout``) is the other, and every backend (local steps, session steps, pods,
SandboxClaims; Temporal activities through the config they carry) asks :func:`effective`
which one holds. The answer names its source, so a timeout says whose bound fired. The step's
bound wins a tie: the caller set it for this step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

from ironflow import errors

__all__ = ["PROVIDER", "STEP", "StepBound", "effective", "step_seconds"]

STEP: Final = "step"
PROVIDER: Final = "provider"


@dataclass(frozen=True)
class StepBound:
    """The seconds a step may run and whose bound that is (``"step"`` or ``"provider"``)."""

    seconds: float
    source: Literal["step", "provider"]

    def timed_out(self) -> errors.AgentTimeout:
        """The failure of a step stopped at this bound, naming it."""
        return errors.AgentTimeout(self.seconds, bound=self.source)


def effective(step_s: float | None, provider_s: float) -> StepBound:
    """The bound a step runs under: its own ``step_s`` when set and not longer, else the provider's.

    >>> effective(3, 120)
    StepBound(seconds=3.0, source='step')
    >>> effective(None, 120)
    StepBound(seconds=120.0, source='provider')
    >>> effective(600, 120).source
    'provider'
    """
    if step_s is not None and step_s <= provider_s:
        return StepBound(float(step_s), STEP)
    return StepBound(float(provider_s), PROVIDER)


def step_seconds(value: float | None) -> float | None:
    """A step's timeout as float seconds; one line for a value no clock reaches (0, negative, inf, NaN).

    >>> step_seconds(3)
    3.0
    """
    if value is not None and not (math.isfinite(value) and value > 0):
        raise errors.ConfigError(f"timeout must be a positive finite number of seconds, got {value!r}")
    return None if value is None else float(value)
