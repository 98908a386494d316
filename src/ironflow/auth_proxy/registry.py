"""The grant registry: its protocol, its semantics, and the in-memory backend.

Semantics (§6.4), the same for every backend: a registry maps token ids to grants and
never sees a token. ``resolve`` answers the grant, or why not: ``UNKNOWN`` (never
issued, or purged), ``EXPIRED`` (the grant is dropped, no tombstone), ``REVOKED`` (a
tombstone exists). ``revoke`` drops the grant and keeps a tombstone until the grant's
own expiry; ``purge_expired`` drops both once expired. A grant's egress decision lines
(``note_egress``) live as long as the grant. A backend failure raises
:class:`RegistryUnavailable`, which the proxy answers with 503, never with 401: a pod
must not conclude its token was revoked because a database blinked.

The in-memory backend serves one process; share one instance between app objects
(replicas in one process). Several processes need the PostgreSQL backend.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from ironflow.auth_proxy import tokens
from ironflow.egress import EgressPolicy
from ironflow.secrets import Secret

__all__ = [
    "EGRESS_NOTES_KEPT",
    "GrantCache",
    "GrantRegistry",
    "MemoryRegistry",
    "RegistryUnavailable",
    "Resolution",
    "Usage",
    "issue",
]


#: How many egress decision lines a grant keeps for its step's record (the last ones).
EGRESS_NOTES_KEPT: Final = 200


class RegistryUnavailable(Exception):
    """The backend failed (or a key version is missing); the text is safe to log."""


class Resolution(enum.Enum):
    """Why a token id resolved to no grant; each reads as the same 401 to the caller."""

    UNKNOWN = "unknown"
    EXPIRED = "expired"
    REVOKED = "revoked"


@dataclass(frozen=True)
class Usage:
    """What a token has consumed so far (counted only for tokens issued with limits)."""

    requests: int = 0
    output_tokens: int = 0


@runtime_checkable
class GrantRegistry(Protocol):
    """Where grants live. Every method may raise :class:`RegistryUnavailable`."""

    async def insert(self, grant: tokens.Grant) -> None: ...

    async def resolve(self, grant_id: str, now: int) -> tokens.Grant | Resolution: ...

    async def revoke(self, grant_id: str) -> bool: ...

    async def revoke_run(self, run_id: str) -> int: ...

    async def set_egress(self, run_id: str, step: str | None, policy: EgressPolicy | None) -> int:
        """Give the live grants of ``run_id`` (of its ``step`` when named) that carry an egress policy
        (the tokens that reach the egress proxy; never a Claude or relay token) a new one; how many.
        Every replica decides the next connection of those grants by it."""
        ...

    async def purge_expired(self, now: int) -> int: ...

    async def count(self) -> int: ...

    async def take_request(self, grant_id: str) -> Usage:
        """Count one request against the grant; return the usage *before* it."""
        ...

    async def add_output_tokens(self, grant_id: str, count: int) -> None: ...

    async def note_egress(self, grant_id: str, line: str) -> None:
        """Keep one egress decision line of a live grant (its last :data:`EGRESS_NOTES_KEPT`; none for
        a grant that is gone), for the step's record: every replica's decisions in one place."""
        ...

    async def egress_notes(self, grant_id: str) -> list[str]:
        """The grant's kept egress decision lines, oldest first (none once it is revoked)."""
        ...

    async def close(self) -> None: ...


async def issue(registry: GrantRegistry, request: tokens.TokenRequest) -> tuple[tokens.Grant, Secret]:
    """Mint a token for a validated request and store its grant; the token leaves only here."""
    token = tokens.new_token()
    grant = tokens.Grant(
        id=tokens.token_id(token.reveal()),
        run_id=request.run_id,
        step=request.step,
        expires_at=request.expires_at,
        credential=request.credential,
        limits=request.limits,
        trace_context=request.trace_context,
        egress=request.egress,
    )
    await registry.insert(grant)
    return grant, token


class MemoryRegistry:
    """Grants in a dict: one process, lost on restart; the default registry."""

    def __init__(self) -> None:
        self._grants: dict[str, tokens.Grant] = {}
        self._tombstones: dict[str, tuple[str, int]] = {}
        self._usage: dict[str, Usage] = {}
        self._notes: dict[str, collections.deque[str]] = {}

    def __repr__(self) -> str:
        return f"MemoryRegistry(grants={len(self._grants)}, tombstones={len(self._tombstones)})"

    async def insert(self, grant: tokens.Grant) -> None:
        self._grants[grant.id] = grant

    async def resolve(self, grant_id: str, now: int) -> tokens.Grant | Resolution:
        grant = self._grants.get(grant_id)
        if grant is None:
            return Resolution.REVOKED if grant_id in self._tombstones else Resolution.UNKNOWN
        if grant.expires_at <= now:
            self._drop(grant_id)
            return Resolution.EXPIRED
        return grant

    def _drop(self, grant_id: str) -> tokens.Grant | None:
        self._usage.pop(grant_id, None)
        self._notes.pop(grant_id, None)
        return self._grants.pop(grant_id, None)

    async def revoke(self, grant_id: str) -> bool:
        grant = self._drop(grant_id)
        if grant is None:
            return False
        self._tombstones[grant_id] = (grant.run_id, grant.expires_at)
        return True

    def run_grant_ids(self, run_id: str) -> list[str]:
        """Ids of the live grants of a run (what ``revoke_run`` would revoke now)."""
        return [grant_id for grant_id, grant in self._grants.items() if grant.run_id == run_id]

    def changed_grant_ids(self, run_id: str, step: str | None) -> list[str]:
        """Ids of the live grants :meth:`set_egress` would change now: those that carry a policy."""
        return [
            g
            for g in self.run_grant_ids(run_id)
            if self._grants[g].egress is not None and (step is None or self._grants[g].step == step)
        ]

    async def set_egress(self, run_id: str, step: str | None, policy: EgressPolicy | None) -> int:
        ids = self.changed_grant_ids(run_id, step)
        for grant_id in ids:
            self._grants[grant_id] = dataclasses.replace(self._grants[grant_id], egress=policy)
        return len(ids)

    async def revoke_run(self, run_id: str) -> int:
        ids = self.run_grant_ids(run_id)
        for grant_id in ids:
            await self.revoke(grant_id)
        return len(ids)

    async def purge_expired(self, now: int) -> int:
        expired = [grant_id for grant_id, grant in self._grants.items() if grant.expires_at <= now]
        for grant_id in expired:
            self._drop(grant_id)
        for grant_id in [t for t, (_, expires_at) in self._tombstones.items() if expires_at <= now]:
            del self._tombstones[grant_id]
        return len(expired)

    async def count(self) -> int:
        return len(self._grants)

    async def take_request(self, grant_id: str) -> Usage:
        before = self._usage.get(grant_id, Usage())
        if grant_id in self._grants:
            self._usage[grant_id] = Usage(before.requests + 1, before.output_tokens)
        return before

    async def add_output_tokens(self, grant_id: str, count: int) -> None:
        if grant_id in self._grants:
            before = self._usage.get(grant_id, Usage())
            self._usage[grant_id] = Usage(before.requests, before.output_tokens + count)

    async def note_egress(self, grant_id: str, line: str) -> None:
        if grant_id in self._grants:
            self._notes.setdefault(grant_id, collections.deque(maxlen=EGRESS_NOTES_KEPT)).append(line)

    async def egress_notes(self, grant_id: str) -> list[str]:
        return list(self._notes.get(grant_id, ()))

    async def close(self) -> None:
        return None


class GrantCache:
    """Grants a replica reuses without asking its backend, kept honest by revocation news.

    Only trusted while ``enabled`` (the backend's revocation feed is connected); entries
    live ``ttl_s`` at most and never past their grant's expiry. A read that began before
    a revocation was announced is not stored: :meth:`ticket` before the read, :meth:`put`
    with it after.
    """

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.enabled = False
        self._entries: dict[str, tuple[tokens.Grant, float]] = {}
        self._generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, grant_id: str, now: int) -> tokens.Grant | None:
        if not self.enabled:
            return None
        entry = self._entries.get(grant_id)
        if entry is None:
            return None
        grant, stored_at = entry
        if grant.expires_at > now and time.monotonic() - stored_at < self.ttl_s:
            return grant
        self._entries.pop(grant_id, None)
        return None

    def ticket(self) -> int:
        return self._generation

    async def read_through(
        self, grant_id: str, now: int, load: Callable[[], Awaitable[tokens.Grant | Resolution]]
    ) -> tokens.Grant | Resolution:
        """The cached grant, else what ``load`` answers; a loaded grant is kept under the ticket
        taken before the load, so a revocation announced meanwhile keeps it out."""
        cached = self.get(grant_id, now)
        if cached is not None:
            return cached
        ticket = self.ticket()
        answer = await load()
        if isinstance(answer, tokens.Grant):
            self.put(answer, ticket)
        return answer

    def put(self, grant: tokens.Grant, ticket: int) -> None:
        if self.enabled and self.ttl_s > 0 and ticket == self._generation:
            self._entries[grant.id] = (grant, time.monotonic())

    def evict(self, grant_ids: Iterable[str]) -> None:
        self._generation += 1
        for grant_id in grant_ids:
            self._entries.pop(grant_id, None)

    def evict_run(self, run_id: str) -> None:
        self.evict([g for g, (grant, _) in self._entries.items() if grant.run_id == run_id])

    def clear(self) -> None:
        self._generation += 1
        self._entries.clear()

    def drop_stale(self, now: int) -> None:
        """Keep the cache bounded: the purge pass (every 60 s) drops expired and old entries."""
        oldest = time.monotonic() - self.ttl_s
        for grant_id in [g for g, (grant, at) in self._entries.items() if grant.expires_at <= now or at < oldest]:
            del self._entries[grant_id]
