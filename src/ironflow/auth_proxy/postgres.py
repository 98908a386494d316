"""The PostgreSQL grant registry: grants shared by every replica, credentials sealed at rest.

Schema (§6.7) from the versioned migrations under ``auth_proxy/migrations``, applied at
open under an advisory lock. Only the credential value is encrypted (AES-256-GCM, key
ring of ``IRONFLOW_SECRET_KEYS``); a row naming a key version the ring lacks raises
:class:`~ironflow.auth_proxy.crypto.MissingKeyVersion`, answered with 503.

Each replica keeps a short-lived cache of resolved grants so a relayed request costs
no database round trip. Revocations fan out with ``NOTIFY``: every replica ``LISTEN``s
and drops the revoked entries at once. When the listening connection is lost the
cache is switched off (every resolve reads the database) until it is back, so a
revocation is never missed; a generation counter keeps a read that raced a
revocation out of the cache.

Never logs or repeats the database URL; asyncpg errors become
:class:`~ironflow.auth_proxy.registry.RegistryUnavailable` with a fixed text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

import asyncpg

from ironflow import migrations
from ironflow.auth_proxy import crypto, logs, registry, tokens
from ironflow.secrets import Secret

__all__ = ["COMPONENT", "NOTIFY_CHANNEL", "PostgresRegistry", "RotationReport", "rotate_keys"]

COMPONENT: Final = "auth_proxy"
MIGRATIONS_PACKAGE: Final = "ironflow.auth_proxy.migrations"
NOTIFY_CHANNEL: Final = "ironflow_auth_proxy_revoked"
_RECONNECT_S: Final = 1.0
#: A hung database answers 503 after this long instead of holding the pod's request.
_COMMAND_TIMEOUT_S: Final = 5.0
_CONNECT_TIMEOUT_S: Final = 10.0
_DB_ERRORS: Final = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)
_COLUMNS: Final = (
    "id, run_id, step, expires_at, credential_kind, secret_spec, encrypted_credential, nonce, key_version, limits"
)


@contextlib.asynccontextmanager
async def _guard(operation: str) -> AsyncIterator[None]:
    """asyncpg failures as RegistryUnavailable with a fixed text (no URL, no query values).

    On ``connect`` a malformed URL raises ValueError, whose text may quote the URL: it is
    replaced too, and not chained.
    """
    try:
        yield
    except _DB_ERRORS as exc:
        raise registry.RegistryUnavailable(f"registry database failed during {operation}") from exc
    except ValueError:
        if operation != "connect":
            raise
        raise registry.RegistryUnavailable("the registry database URL cannot be parsed") from None


def _sealed(row: Any) -> crypto.Sealed:
    """The stored ciphertext, nonce and key version of a grant row."""
    return crypto.Sealed(bytes(row["encrypted_credential"]), bytes(row["nonce"]), row["key_version"])


def _grant_from_row(row: Any, ring: crypto.KeyRing) -> tokens.Grant:
    """A stored grant, opened and read back through the wire format (:func:`tokens.grant_from_wire`)."""
    value = ring.open(_sealed(row)).decode()
    credential: dict[str, Any]
    if row["credential_kind"] == "secret":
        credential = {**json.loads(row["secret_spec"]), "value": value}
    else:
        credential = {"kind": row["credential_kind"], "value": value}
    limits = row["limits"]
    wire = {
        "id": row["id"],
        "run_id": row["run_id"],
        "step": row["step"],
        "expires_at": row["expires_at"],
        "credential": credential,
        "limits": None if limits is None else json.loads(limits),
    }
    return tokens.grant_from_wire(wire, source="in the registry database")


@dataclass(frozen=True)
class RotationReport:
    """What ``rotate-keys`` did: rows re-sealed, rows already under the active key, rows it could not open."""

    resealed: int
    current: int
    unreadable: int


class PostgresRegistry:
    """Grants in ``ironflow.auth_proxy_grants``; open with :meth:`open`, close with :meth:`close`."""

    def __init__(self, pool: Any, ring: crypto.KeyRing, *, dsn: Secret, cache_ttl_s: float) -> None:
        self._pool = pool
        self._dsn = dsn
        self._ring = ring
        self._cache = registry.GrantCache(cache_ttl_s)
        self._listener: Any = None
        self._listening = False
        self._reconnect: asyncio.Task[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresRegistry(cached={len(self._cache)}, listening={self._listening})"

    @classmethod
    async def open(
        cls,
        dsn: Secret,
        ring: crypto.KeyRing,
        *,
        cache_ttl_s: float = 30.0,
        min_size: int = 1,
        max_size: int = 10,
    ) -> PostgresRegistry:
        """Connect, apply the migrations, start listening for revocations."""
        async with _guard("connect"):
            pool = await asyncpg.create_pool(
                dsn.reveal(),
                min_size=min_size,
                max_size=max_size,
                timeout=_CONNECT_TIMEOUT_S,
                command_timeout=_COMMAND_TIMEOUT_S,
            )
        self = cls(pool, ring, dsn=dsn, cache_ttl_s=cache_ttl_s)
        try:
            async with _guard("migrate"), pool.acquire() as conn:
                await migrations.migrate(conn, COMPONENT, MIGRATIONS_PACKAGE)
            if cache_ttl_s > 0:
                await self._listen()
        except BaseException:
            await pool.close()
            raise
        return self

    # --- revocation fan-out --------------------------------------------------------

    async def _listen(self) -> None:
        async with _guard("listen"):
            conn = await asyncpg.connect(self._dsn.reveal(), timeout=_CONNECT_TIMEOUT_S)
        await conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
        conn.add_termination_listener(self._on_listener_lost)
        self._listener = conn
        self._listening = True
        self._cache.enabled = True

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        kind, _, value = payload.partition(":")
        if kind == "id":
            self._cache.evict([value])
        elif kind == "run":
            self._cache.evict_run(value)
        else:
            self._cache.clear()

    def _on_listener_lost(self, conn: Any) -> None:
        # Without the listener a revocation could be missed: stop trusting the cache.
        self._listening = False
        self._cache.enabled = False
        self._cache.clear()
        if not self._closed and (self._reconnect is None or self._reconnect.done()):
            self._reconnect = asyncio.get_running_loop().create_task(self._relisten())

    async def _relisten(self) -> None:
        while not self._closed and not self._listening:
            await asyncio.sleep(_RECONNECT_S)
            with contextlib.suppress(registry.RegistryUnavailable, *_DB_ERRORS):
                await self._listen()
                logs.event("registry revocation listener reconnected")

    async def _notify(self, conn: Any, payload: str) -> None:
        await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, payload)

    # --- the GrantRegistry protocol ------------------------------------------------------

    async def insert(self, grant: tokens.Grant) -> None:
        credential = grant.credential
        sealed = self._ring.seal(credential.value.reveal().encode())
        if isinstance(credential, tokens.SecretCredential):
            kind, spec = "secret", json.dumps(credential.spec())
        else:
            kind, spec = credential.kind, None
        limits = None if grant.limits.empty else json.dumps(grant.limits.to_json())
        async with _guard("insert"):
            await self._pool.execute(
                "INSERT INTO ironflow.auth_proxy_grants (id, run_id, step, expires_at, credential_kind, secret_spec,"
                " encrypted_credential, nonce, key_version, limits)"
                " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10::jsonb)",
                grant.id,
                grant.run_id,
                grant.step,
                grant.expires_at,
                kind,
                spec,
                sealed.ciphertext,
                sealed.nonce,
                sealed.key_version,
                limits,
            )

    async def resolve(self, grant_id: str, now: int) -> tokens.Grant | registry.Resolution:
        return await self._cache.read_through(grant_id, now, lambda: self._resolve_row(grant_id, now))

    async def _resolve_row(self, grant_id: str, now: int) -> tokens.Grant | registry.Resolution:
        async with _guard("resolve"):
            row = await self._pool.fetchrow(
                f"SELECT {_COLUMNS} FROM ironflow.auth_proxy_grants WHERE id = $1",  # noqa: S608 - fixed columns
                grant_id,
            )
            if row is None:
                revoked = await self._pool.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM ironflow.auth_proxy_revocations WHERE id = $1)", grant_id
                )
                return registry.Resolution.REVOKED if revoked else registry.Resolution.UNKNOWN
            if int(row["expires_at"]) <= now:
                await self._pool.execute("DELETE FROM ironflow.auth_proxy_grants WHERE id = $1", grant_id)
                return registry.Resolution.EXPIRED
        return _grant_from_row(row, self._ring)

    async def revoke(self, grant_id: str) -> bool:
        async with _guard("revoke"), self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "DELETE FROM ironflow.auth_proxy_grants WHERE id = $1 RETURNING run_id, expires_at", grant_id
            )
            if row is None:
                return False
            await conn.execute(
                "INSERT INTO ironflow.auth_proxy_revocations (id, run_id, expires_at) VALUES ($1, $2, $3)"
                " ON CONFLICT (id) DO NOTHING",
                grant_id,
                row["run_id"],
                row["expires_at"],
            )
            await self._notify(conn, f"id:{grant_id}")
        self._cache.evict([grant_id])
        return True

    async def revoke_run(self, run_id: str) -> int:
        async with _guard("revoke_run"), self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                "DELETE FROM ironflow.auth_proxy_grants WHERE run_id = $1 RETURNING id, expires_at", run_id
            )
            if rows:
                await conn.executemany(
                    "INSERT INTO ironflow.auth_proxy_revocations (id, run_id, expires_at) VALUES ($1, $2, $3)"
                    " ON CONFLICT (id) DO NOTHING",
                    [(r["id"], run_id, r["expires_at"]) for r in rows],
                )
                await self._notify(conn, f"run:{run_id}")
        self._cache.evict([r["id"] for r in rows])
        return len(rows)

    async def purge_expired(self, now: int) -> int:
        self._cache.drop_stale(now)
        async with _guard("purge"), self._pool.acquire() as conn, conn.transaction():
            status = await conn.execute("DELETE FROM ironflow.auth_proxy_grants WHERE expires_at <= $1", now)
            await conn.execute("DELETE FROM ironflow.auth_proxy_revocations WHERE expires_at <= $1", now)
        return int(status.split()[-1])

    async def count(self) -> int:
        async with _guard("count"):
            return int(await self._pool.fetchval("SELECT count(*) FROM ironflow.auth_proxy_grants"))

    async def take_request(self, grant_id: str) -> registry.Usage:
        async with _guard("count request"):
            row = await self._pool.fetchrow(
                "UPDATE ironflow.auth_proxy_grants SET requests_used = requests_used + 1, updated_at = NOW()"
                " WHERE id = $1 RETURNING requests_used, output_tokens_used",
                grant_id,
            )
        if row is None:
            return registry.Usage()
        return registry.Usage(int(row["requests_used"]) - 1, int(row["output_tokens_used"]))

    async def add_output_tokens(self, grant_id: str, count: int) -> None:
        async with _guard("count output tokens"):
            await self._pool.execute(
                "UPDATE ironflow.auth_proxy_grants SET output_tokens_used = output_tokens_used + $2,"
                " updated_at = NOW() WHERE id = $1",
                grant_id,
                count,
            )

    async def close(self) -> None:
        self._closed = True
        self._listening = False
        if self._reconnect is not None:
            self._reconnect.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconnect
        if self._listener is not None:
            with contextlib.suppress(*_DB_ERRORS):
                await self._listener.close()
            self._listener = None
        await self._pool.close()


async def rotate_keys(dsn: Secret, ring: crypto.KeyRing) -> RotationReport:
    """Re-seal every grant not under the active key; rows with an unknown key are counted, left alone."""
    async with _guard("connect"):
        conn = await asyncpg.connect(dsn.reveal())
    try:
        async with _guard("migrate"):
            await migrations.migrate(conn, COMPONENT, MIGRATIONS_PACKAGE)
        resealed = current = unreadable = 0
        async with _guard("rotate"), conn.transaction():
            rows = await conn.fetch(
                "SELECT id, encrypted_credential, nonce, key_version FROM ironflow.auth_proxy_grants FOR UPDATE"
            )
            for row in rows:
                if row["key_version"] == ring.active_version:
                    current += 1
                    continue
                try:
                    plain = ring.open(_sealed(row))
                except crypto.MissingKeyVersion:
                    unreadable += 1
                    continue
                sealed = ring.seal(plain)
                await conn.execute(
                    "UPDATE ironflow.auth_proxy_grants SET encrypted_credential = $2, nonce = $3, key_version = $4,"
                    " updated_at = NOW() WHERE id = $1",
                    row["id"],
                    sealed.ciphertext,
                    sealed.nonce,
                    sealed.key_version,
                )
                resealed += 1
        return RotationReport(resealed, current, unreadable)
    finally:
        with contextlib.suppress(*_DB_ERRORS):
            await conn.close()
