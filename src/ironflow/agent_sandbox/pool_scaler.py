"""The loop that keeps a SandboxWarmPool's replicas on its demand: watch, decide, write ``/scale`` (I/O).

Two watches feed it: the namespace's SandboxClaims (those whose ``warmPoolRef`` names the
pool are its demand) and the one pool (``fieldSelector metadata.name``: its replicas and
ready members). Each event, and a tick every ``tick_s`` (the cooldown and the window move
with time alone), runs the pure :func:`~ironflow.agent_sandbox.demand.decide`; a decision
that changes the replicas is written as a merge patch of the pool's scale subresource,
never of its spec, so the scaler needs ``get``/``patch`` on ``sandboxwarmpools/scale`` and
read access to claims and to that pool, nothing more.

Clocks: a claim's arrival is the monotonic time the scaler first saw it; claims already
there at start (or after a re-list) are placed by their ``creationTimestamp``'s age on the
wall clock, a creation time ahead of it counting as now, so a skewed API server clock
shifts no rate. Deleted claims still count: demand happened. v1beta1 (agent-sandbox 1.0)
only, as :mod:`~ironflow.agent_sandbox.lifecycle`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from ironflow import errors
from ironflow.agent_sandbox import claims, demand, lifecycle
from ironflow.kube import api as kube

__all__ = ["DEFAULT_TICK_S", "PoolScaler", "arrival", "claims_pool"]

_log = logging.getLogger(__name__)

#: How often a quiet pool is decided again (the window and the cooldown move with time alone).
DEFAULT_TICK_S: Final = 5.0
_RES: Final = claims.resources()


def claims_pool(claim: Mapping[str, Any]) -> str | None:
    """The pool a v1beta1 claim draws on (``spec.warmPoolRef.name``), or None (pure)."""
    ref = (claim.get("spec") or {}).get("warmPoolRef") or {}
    name = ref.get("name")
    return str(name) if name else None


def arrival(claim: Mapping[str, Any], *, mono_now: float, wall_now: float) -> float:
    """A listed claim's arrival on the monotonic clock: now less its age by ``creationTimestamp``,
    an age below 0 (the server's clock ahead) or unreadable counting as 0 (pure).

    >>> arrival({"metadata": {"creationTimestamp": "1970-01-01T00:01:40Z"}}, mono_now=50.0, wall_now=130.0)
    20.0
    """
    created = lifecycle.epoch((claim.get("metadata") or {}).get("creationTimestamp"))
    return mono_now - (max(0.0, wall_now - created) if created is not None else 0.0)


class PoolScaler:
    """Keeps one pool's replicas on its demand until cancelled. ``report`` gets every decision
    and whether it was written."""

    def __init__(
        self,
        api: kube.KubeApi,
        namespace: str,
        pool: str,
        policy: demand.DemandPolicy,
        *,
        tick_s: float = DEFAULT_TICK_S,
        report: Callable[[demand.Decision, bool], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        policy.validate()
        self.api, self.namespace, self.pool, self.policy = api, namespace, pool, policy
        self.tick_s = tick_s
        self._report = report
        self._mono, self._wall = monotonic, wall
        self._arrivals: dict[str, float] = {}  # claim uid -> arrival
        self._pool: Mapping[str, Any] | None = None
        self._replicas: int | None = None
        # Start as if the replicas had just changed: the first step down waits a cooldown.
        self._last_change = monotonic()
        #: Scale writes made (for tests and the log).
        self.writes = 0

    def reading(self) -> demand.PoolReading | None:
        """What the watches showed, as the decision's input (None until the pool is seen)."""
        if self._pool is None:
            return None
        spec, status = self._pool.get("spec") or {}, self._pool.get("status") or {}
        return demand.PoolReading(
            replicas=int(spec.get("replicas", 1)),
            ready=int(status.get("readyReplicas", 0)),
            arrivals=tuple(self._arrivals.values()),
            last_change=self._last_change,
        )

    def _see_claims(self, items: Iterable[Mapping[str, Any]], *, listed: bool) -> None:
        now, wall = self._mono(), self._wall()
        for claim in items:
            uid = str((claim.get("metadata") or {}).get("uid", ""))
            if claims_pool(claim) != self.pool or not uid or uid in self._arrivals:
                continue
            self._arrivals[uid] = arrival(claim, mono_now=now, wall_now=wall) if listed else now
        horizon = now - self.policy.window_s
        self._arrivals = {uid: t for uid, t in self._arrivals.items() if t > horizon}

    def _see_pool(self, pool: Mapping[str, Any] | None) -> None:
        self._pool = pool
        replicas = None if pool is None else int((pool.get("spec") or {}).get("replicas", 1))
        if replicas is not None and self._replicas is not None and replicas != self._replicas:
            self._last_change = self._mono()  # changed by us or by anyone: the cooldown restarts
        self._replicas = replicas if replicas is not None else self._replicas

    def apply(self, resource: kube.Resource, event: kube.WatchEvent) -> None:
        """Fold one watch event into what the scaler knows."""
        if resource == _RES.claims:
            if event.type == "RELISTED":
                self._see_claims(event.items, listed=True)
            elif event.type == "ADDED":
                self._see_claims([event.object], listed=False)
            return
        if event.type == "RELISTED":
            self._see_pool(next(iter(event.items), None))
        elif event.type == "DELETED":
            self._see_pool(None)
        else:
            self._see_pool(event.object)

    async def step(self) -> demand.Decision | None:
        """Decide on what is known now; write the scale when the decision changes the replicas."""
        self._see_claims((), listed=False)  # drop arrivals the window has passed
        reading = self.reading()
        if reading is None:
            return None
        decision = demand.decide(self.policy, reading, now=self._mono())
        written = decision.changes(reading)
        if written:
            patch = {"spec": {"replicas": decision.replicas}}
            scale = await self.api.patch(_RES.pools, self.namespace, self.pool, patch, subresource="scale")
            self.writes += 1
            self._last_change = self._mono()
            self._replicas = int((scale.get("spec") or {}).get("replicas", decision.replicas))
            known = dict(self._pool or {})  # until the watch shows the pool again, it has the written replicas
            self._pool = {**known, "spec": {**(known.get("spec") or {}), "replicas": self._replicas}}
        if self._report is not None:
            self._report(decision, written)
        return decision

    async def _pump(self, resource: kube.Resource, queue: asyncio.Queue[tuple[kube.Resource, kube.WatchEvent]]) -> None:
        selector = f"metadata.name={self.pool}" if resource == _RES.pools else None
        async with contextlib.aclosing(self.api.watch(resource, self.namespace, field_selector=selector)) as events:
            async for event in events:
                await queue.put((resource, event))

    async def run(self) -> None:
        """Watch and scale until cancelled; a watch that fails for good, or a refused write, ends it
        with its error (a conflict or an unavailable API server is retried on the next tick)."""
        queue: asyncio.Queue[tuple[kube.Resource, kube.WatchEvent]] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        pumps = [
            loop.create_task(self._pump(r, queue), name=f"pool-scaler {r.plural}") for r in (_RES.pools, _RES.claims)
        ]
        try:
            while True:
                for pump in pumps:
                    if pump.done():  # a watch that gave up: its error, one line for the command
                        pump.result()
                        raise errors.KubeUnavailable(f"the pool scaler's watch of {pump.get_name()} ended")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.tick_s):
                        self.apply(*await queue.get())
                while not queue.empty():
                    self.apply(*queue.get_nowait())
                try:
                    await self.step()
                except errors.KubernetesError as exc:
                    if not exc.retryable:  # refused (403, 404): a setting to fix, not a moment to wait
                        raise
                    _log.warning("pool %s/%s: scale not written, next tick retries: %s", self.namespace, self.pool, exc)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
