"""How many members a warm pool should hold, from the claims it served (pure).

The decision :func:`decide` makes, on any one clock (the scaler uses a monotonic one):

======================  =====================================================================
claims per minute       claims on the pool that arrived in the last ``window_s``, per minute
in flight               claims per minute / 60 x ``ready_s`` (the time a new member takes to
                        get ready), rounded up: members claimed while a replacement starts
needed                  in flight + ``spare`` (ready members kept beyond that), within
                        ``min_replicas``..``max_replicas``
up                      needed above the pool's replicas: at once, to needed
down                    needed below the replicas, at least needed members ready (a
                        shortfall is never scaled away), and ``cooldown_s`` passed since the
                        last change:
                        ``step_down`` members per cooldown, never below needed
======================  =====================================================================

An arrival later than ``now`` (the API server's clock ahead of ours) counts as ``now``; a
last change later than ``now`` (a clock stepped back) means the cooldown has not passed.
Nothing here reads a clock or talks to a cluster: the caller passes ``now`` and the readings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ironflow import errors

__all__ = ["Decision", "DemandPolicy", "PoolReading", "decide"]


@dataclass(frozen=True)
class DemandPolicy:
    """The bounds and the pace of a demand-following pool.

    >>> DemandPolicy(min_replicas=1, max_replicas=20).spare
    1
    """

    min_replicas: int
    max_replicas: int
    #: Ready members kept beyond the claims expected while a new member starts.
    spare: int = 1
    #: Seconds a new member takes to get ready (pod start, image, readiness probe).
    ready_s: float = 30.0
    #: The claims of this many seconds make the rate.
    window_s: float = 60.0
    #: Seconds between the last change and a step down, and between two steps down.
    cooldown_s: float = 300.0
    #: Members removed per step down.
    step_down: int = 1

    def problem(self) -> str | None:
        """Why these settings cannot scale a pool, or None."""
        if self.min_replicas < 0:
            return f"min {self.min_replicas} is below 0"
        if self.min_replicas > self.max_replicas:
            return f"min {self.min_replicas} is above max {self.max_replicas}"
        if self.spare < 0:
            return f"spare {self.spare} is below 0"
        if self.ready_s < 0 or self.cooldown_s < 0:
            return "ready time and cooldown must be 0 or more seconds"
        if self.window_s <= 0:
            return f"window {self.window_s:g}s must be more than 0 seconds"
        if self.step_down < 1:
            return f"step down {self.step_down} must be at least 1"
        return None

    def validate(self) -> None:
        """Raise :class:`~ironflow.errors.ConfigError` ``invalid pool scaler: {reason}``."""
        problem = self.problem()
        if problem is not None:
            raise errors.ConfigError(f"invalid pool scaler: {problem}")


@dataclass(frozen=True)
class PoolReading:
    """What the scaler saw of one pool: its replicas (``spec``), its ready members, its claims."""

    replicas: int
    ready: int
    #: When each claim on the pool arrived (any order; old ones are ignored).
    arrivals: tuple[float, ...] = ()
    #: When the pool's replicas last changed (by the scaler or anyone); None: unknown, long ago.
    last_change: float | None = None


@dataclass(frozen=True)
class Decision:
    """The replicas the pool should have, and the one line that says why."""

    replicas: int
    reason: str
    #: Claims per minute over the window (for the log line and tests).
    per_minute: float

    def changes(self, reading: PoolReading) -> bool:
        """Whether acting on this decision writes the pool's scale."""
        return self.replicas != reading.replicas


def _recent(arrivals: Iterable[float], *, now: float, window_s: float) -> int:
    """Arrivals within ``window_s`` of ``now``; one from the future counts as now."""
    return sum(1 for t in arrivals if now - min(t, now) < window_s)


def decide(policy: DemandPolicy, reading: PoolReading, *, now: float) -> Decision:
    """The pool's replicas for ``reading`` at ``now`` (see the module's table).

    >>> p = DemandPolicy(min_replicas=1, max_replicas=20, spare=1, ready_s=30, window_s=60)
    >>> decide(p, PoolReading(replicas=1, ready=1, arrivals=(0.0,) * 6), now=10.0).replicas
    4
    >>> decide(p, PoolReading(replicas=4, ready=4, last_change=0.0), now=400.0).reason
    'down to 3: 0.0 claims/min need 1 (cooldown 300s passed)'
    """
    per_minute = _recent(reading.arrivals, now=now, window_s=policy.window_s) * 60.0 / policy.window_s
    in_flight = math.ceil(per_minute / 60.0 * policy.ready_s - 1e-9)
    wanted = in_flight + policy.spare
    needed = max(policy.min_replicas, min(policy.max_replicas, wanted))
    rate = f"{per_minute:.1f} claims/min"
    current = reading.replicas
    if current < policy.min_replicas:
        return Decision(needed, f"up to {needed}: below min {policy.min_replicas}", per_minute)
    if current > policy.max_replicas:
        return Decision(policy.max_replicas, f"down to {policy.max_replicas}: above max", per_minute)
    if needed > current:
        capped = " (max)" if wanted > policy.max_replicas else ""
        why = f"{rate} x {policy.ready_s:g}s ready time = {in_flight} in flight + {policy.spare} spare"
        return Decision(needed, f"up to {needed}{capped}: {why}", per_minute)
    if needed == current:
        return Decision(current, f"hold {current}: {rate} need {needed}", per_minute)
    if reading.ready < needed:
        return Decision(current, f"hold {current}: {reading.ready} ready, short of {needed} ({rate})", per_minute)
    since = None if reading.last_change is None else now - reading.last_change
    if since is not None and since < policy.cooldown_s:
        wait = policy.cooldown_s - max(since, 0.0)
        return Decision(current, f"hold {current}: {rate} need {needed}, cooldown {wait:.0f}s left", per_minute)
    down = max(needed, current - policy.step_down)
    return Decision(down, f"down to {down}: {rate} need {needed} (cooldown {policy.cooldown_s:g}s passed)", per_minute)
