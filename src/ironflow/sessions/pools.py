"""A pool of pre-warmed sandbox sessions, as a policy and one decision (pure).

A pre-warmed session is a sandbox started and set up (its runtime imported, confined, listening)
that waits with no token and nothing of anyone's in it. A request whose options the pool fits
takes one; the pool hands it out once, with that request's token, and never takes it back: a
closed session is torn down as any other. :class:`PoolPolicy` says how many wait, how many
start at once, how long one waits before it is replaced; :func:`refill` decides, from ``now``
and when each member got ready, which expire and how many start. Which requests a member fits
is the backend's to say (what its sandbox binds at start). Nothing here starts anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ironflow import errors

__all__ = ["DEFAULT_IDLE_EXPIRY_S", "DEFAULT_MAX_STARTS", "PoolPolicy", "Refill", "refill"]

#: How long a warm session waits before it is replaced by a fresh one.
DEFAULT_IDLE_EXPIRY_S: Final = 600.0
#: Sandboxes started at once to fill the pool (each is a bubblewrap or runsc and a Python start).
DEFAULT_MAX_STARTS: Final = 2
#: After a failed start, how long before the next try (a broken sandbox must not spin).
_RETRY_AFTER_S: Final = 5.0


@dataclass(frozen=True)
class PoolPolicy:
    """How a backend keeps sessions warm.

    Args:
        size: sessions kept waiting (0: no pool).
        max_starts: sandboxes started at once while refilling.
        idle_expiry: seconds a member waits before it is torn down and replaced.
        retry_after: seconds without a start after one failed.
        workspaces: how many of ``size`` wait with an empty workspace bound, for the sessions that
            bring one (a fork, a copy of a directory); the rest serve sessions without one. A backend
            whose warm sandboxes bind none (local gVisor, Docker) keeps them all plain.

    Raises:
        ConfigError: a negative size, fewer than one start, a non-positive expiry, workspaces
            outside 0 to ``size``.
    """

    size: int
    max_starts: int = DEFAULT_MAX_STARTS
    idle_expiry: float = DEFAULT_IDLE_EXPIRY_S
    retry_after: float = _RETRY_AFTER_S
    workspaces: int = 0

    def __post_init__(self) -> None:
        if self.size < 0:
            raise errors.ConfigError(f"a session pool's size must be 0 or more, not {self.size}")
        if self.max_starts < 1:
            raise errors.ConfigError(f"a session pool starts at least one sandbox at once, not {self.max_starts}")
        if not (self.idle_expiry > 0 and self.retry_after >= 0):
            raise errors.ConfigError("a session pool's idle expiry must be a positive number of seconds")
        if not 0 <= self.workspaces <= self.size:
            raise errors.ConfigError(
                f"a session pool's workspaces are 0 to its size ({self.size}), not {self.workspaces}"
            )


@dataclass(frozen=True)
class Refill:
    """One look at the pool: the members that expire now (their indexes), how many sandboxes to
    start, and in how many seconds to look again unless something happens first (None: only then)."""

    expired: tuple[int, ...]
    starts: int
    wake_in: float | None


def refill(
    policy: PoolPolicy, ready_since: Sequence[float], *, starting: int, now: float, failed_at: float | None = None
) -> Refill:
    """What to do now with members ready since ``ready_since`` (monotonic seconds) and ``starting``
    sandboxes on their way; ``failed_at`` is the last failed start.

    >>> refill(PoolPolicy(3, max_starts=2), [0.0], starting=0, now=1.0)
    Refill(expired=(), starts=2, wake_in=599.0)
    >>> refill(PoolPolicy(1, idle_expiry=10), [0.0], starting=0, now=10.0)
    Refill(expired=(0,), starts=1, wake_in=None)
    """
    expired = tuple(i for i, since in enumerate(ready_since) if now - since >= policy.idle_expiry)
    kept = [since for i, since in enumerate(ready_since) if i not in expired]
    wanted = max(0, policy.size - len(kept) - starting)
    starts = max(0, min(wanted, policy.max_starts - starting))
    waits = [since + policy.idle_expiry - now for since in kept]
    if starts and failed_at is not None and now - failed_at < policy.retry_after:
        waits.append(failed_at + policy.retry_after - now)  # the next try, once the pause is over
        starts = 0
    return Refill(expired, starts, min(waits) if waits else None)
