"""The PostgreSQL grant registry: grants shared by every replica, credentials sealed at rest.

Schema (§6.7) from the versioned migrations under ``auth_proxy/migrations``, applied at
open under an advisory lock. Only the credential value is encrypted (AES-256-GCM, key
ring of ``IRONFLOW_SECRET_KEYS``; an egress-only grant's value is empty, sealed all the
same), with the row's id, credential kind and expiry as associated data: someone who can
write the table but holds no key cannot move a ciphertext into a forged row or another
kind. Rows sealed before that (``seal_format = 0``) are re-sealed at open and never
relayed as they are. A row the ring cannot open raises
:class:`~ironflow.auth_proxy.crypto.MissingKeyVersion` (or its
:class:`~ironflow.auth_proxy.crypto.SealBroken`), answered with 503.

Each replica keeps a short-lived cache of resolved grants so a relayed request costs
no database round trip. Revocations and egress-policy changes fan out with ``NOTIFY``: every
replica ``LISTEN``s and drops the revoked or changed entries at once. When the listening connection is seen lost the
cache is switched off (every resolve reads the database) until it is back, so a
connection that closes misses no revocation; a generation counter keeps a read that
raced a revocation out of the cache. A silently cut link (no FIN, a hung server) sends no
termination: a keep-alive query on the listening connection every
``listen_keepalive_s`` (bounded by the same time) declares it lost, so the cache is off
within twice that interval (until then a revoked token may still be served from it) and
is rebuilt from the database once listening again.

Never logs or repeats the database URL; asyncpg errors become
:class:`~ironflow.auth_proxy.registry.RegistryUnavailable` with a fixed text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

import asyncpg

from ironflow import migrations
from ironflow.auth_proxy import crypto, logs, registry, tokens
from ironflow.egress import EgressPolicy
from ironflow.secrets import Secret

__all__ = [
    "COMPONENT",
    "NOTIFY_CHANNEL",
    "SEAL_FORMAT",
    "PostgresRegistry",
    "RotationReport",
    "associated_data",
    "rotate_keys",
]

COMPONENT: Final = "auth_proxy"
MIGRATIONS_PACKAGE: Final = "ironflow.auth_proxy.migrations"
NOTIFY_CHANNEL: Final = "ironflow_auth_proxy_revoked"
_RECONNECT_S: Final = 1.0
#: A hung database answers 503 after this long instead of holding the pod's request.
_COMMAND_TIMEOUT_S: Final = 5.0
_CONNECT_TIMEOUT_S: Final = 10.0
#: A resolve (both of its queries and the pool wait) answers 503 after this long.
_RESOLVE_TIMEOUT_S: Final = 3.0
#: ``seal_format`` of rows sealed with their id, kind and expiry as associated data.
SEAL_FORMAT: Final = 1
_DB_ERRORS: Final = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)
_COLUMNS: Final = (
    "id, run_id, step, expires_at, credential_kind, secret_spec, encrypted_credential, nonce, key_version, limits,"
    " seal_format, egress"
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


def associated_data(grant_id: str, kind: str, expires_at: int) -> bytes:
    """What a row's ciphertext is bound to: its id, credential kind and expiry."""
    return f"ironflow-auth-proxy-grant\x00{grant_id}\x00{kind}\x00{int(expires_at)}".encode()


def _row_associated_data(row: Any) -> bytes | None:
    """The associated data a row was sealed with (``None`` for a ``seal_format = 0`` row)."""
    if row["seal_format"] == 0:
        return None
    return associated_data(row["id"], row["credential_kind"], row["expires_at"])


def _grant_from_row(row: Any, ring: crypto.KeyRing) -> tokens.Grant:
    """A stored grant, opened and read back through the wire format (:func:`tokens.grant_from_wire`).

    Raises:
        MissingKeyVersion: the row does not open (its key is missing, or it was sealed
            without associated data and not yet re-sealed, or it was altered).
        RegistryUnavailable: the row is malformed (bad limits, spec or value).
    """
    if row["seal_format"] != SEAL_FORMAT:
        raise crypto.SealBroken(row["key_version"])
    plain = ring.open(_sealed(row), _row_associated_data(row))
    try:
        value = plain.decode()
        credential: dict[str, Any]
        if row["credential_kind"] == "secret":
            credential = {**json.loads(row["secret_spec"]), "value": value}
        elif row["credential_kind"] == "egress":
            if value:  # an egress-only row never holds a value: one that does was altered
                raise ValueError("an egress-only grant row holds a value")
            credential = {"kind": "egress"}
        else:
            credential = {"kind": row["credential_kind"], "value": value}
        limits, egress = row["limits"], row["egress"]
        wire = {
            "id": row["id"],
            "run_id": row["run_id"],
            "step": row["step"],
            "expires_at": row["expires_at"],
            "credential": credential,
            "limits": None if limits is None else json.loads(limits),
            "egress": None if egress is None else json.loads(egress),
        }
        return tokens.grant_from_wire(wire, source="in the registry database")
    except (ValueError, TypeError) as exc:  # InvalidTokenRequest and JSON errors are ValueErrors
        raise registry.RegistryUnavailable("a grant row in the registry database is malformed") from exc


@dataclass(frozen=True)
class RotationReport:
    """What ``rotate-keys`` did: rows re-sealed, rows already current, rows it could not open.

    ``missing_key`` rows name a key version the ring lacks (add that key);
    ``broken`` rows do not open with the key the ring has for their version (a different
    key under that number, or an altered row).
    """

    resealed: int
    current: int
    missing_key: int = 0
    broken: int = 0

    @property
    def unreadable(self) -> int:
        return self.missing_key + self.broken


class PostgresRegistry:
    """Grants in ``ironflow.auth_proxy_grants``; open with :meth:`open`, close with :meth:`close`."""

    def __init__(
        self, pool: Any, ring: crypto.KeyRing, *, dsn: Secret, cache_ttl_s: float, listen_keepalive_s: float = 2.0
    ) -> None:
        self._pool = pool
        self._keepalive_s = listen_keepalive_s
        self._keepalive: asyncio.Task[None] | None = None
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
        listen_keepalive_s: float = 2.0,
        min_size: int = 1,
        max_size: int = 10,
    ) -> PostgresRegistry:
        """Connect, apply the migrations, re-seal rows sealed without associated data, listen."""
        async with _guard("connect"):
            pool = await asyncpg.create_pool(
                dsn.reveal(),
                min_size=min_size,
                max_size=max_size,
                timeout=_CONNECT_TIMEOUT_S,
                command_timeout=_COMMAND_TIMEOUT_S,
            )
        self = cls(pool, ring, dsn=dsn, cache_ttl_s=cache_ttl_s, listen_keepalive_s=listen_keepalive_s)
        try:
            async with _guard("migrate"), pool.acquire() as conn:
                await migrations.migrate(conn, COMPONENT, MIGRATIONS_PACKAGE)
                await _reseal(conn, ring, only_legacy=True)
            if cache_ttl_s > 0:
                await self._listen()
                self._keepalive = asyncio.get_running_loop().create_task(
                    self._keepalive_forever(), name="ironflow-auth-proxy-listen-keepalive"
                )
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

    async def _keepalive_forever(self) -> None:
        """Ping the listening connection: a silent cut never fires the termination listener."""
        while not self._closed:
            await asyncio.sleep(self._keepalive_s)
            conn = self._listener
            if conn is None or not self._listening:
                continue
            try:
                await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout=self._keepalive_s)
            except (TimeoutError, *_DB_ERRORS):
                if self._listener is conn and not self._closed:
                    logs.event("registry revocation listener lost", logging.WARNING, reason="keep-alive failed")
                    conn.terminate()
                    self._on_listener_lost(conn)

    def _on_listener_lost(self, conn: Any) -> None:
        # Without the listener a revocation could be missed: stop trusting the cache.
        if conn is not self._listener or not self._listening:
            return
        self._listener = None
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
        credential, spec = grant.credential, None
        if isinstance(credential, tokens.EgressCredential) and grant.egress is None:  # it would reach nothing
            raise registry.RegistryUnavailable("an egress-only grant without a policy is not stored")
        kind = "secret" if isinstance(credential, tokens.SecretCredential) else credential.kind
        # an egress-only grant's value is empty, sealed to its row like any other
        value = b"" if isinstance(credential, tokens.EgressCredential) else credential.value.reveal().encode()
        if isinstance(credential, tokens.SecretCredential):
            spec = json.dumps(credential.spec())
        sealed = self._ring.seal(value, associated_data(grant.id, kind, grant.expires_at))
        limits = None if grant.limits.empty else json.dumps(grant.limits.to_json())
        egress = None if grant.egress is None else json.dumps(grant.egress.to_json())
        async with _guard("insert"):
            await self._pool.execute(
                "INSERT INTO ironflow.auth_proxy_grants (id, run_id, step, expires_at, credential_kind, secret_spec,"
                " encrypted_credential, nonce, key_version, limits, seal_format, egress)"
                " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10::jsonb, $11, $12::jsonb)",
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
                SEAL_FORMAT,
                egress,
            )

    async def resolve(self, grant_id: str, now: int) -> tokens.Grant | registry.Resolution:
        return await self._cache.read_through(grant_id, now, lambda: self._resolve_row(grant_id, now))

    async def _resolve_row(self, grant_id: str, now: int) -> tokens.Grant | registry.Resolution:
        async with _guard("resolve"), asyncio.timeout(_RESOLVE_TIMEOUT_S):
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

    async def set_egress(self, run_id: str, step: str | None, policy: EgressPolicy | None) -> int:
        egress = None if policy is None else json.dumps(policy.to_json())
        async with _guard("set_egress"), self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                "UPDATE ironflow.auth_proxy_grants SET egress = $3::jsonb"
                " WHERE run_id = $1 AND ($2::text IS NULL OR step = $2) AND egress IS NOT NULL RETURNING id",
                run_id,
                step,
                egress,
            )
            if rows:  # every replica drops the run's cached grants: the next connection reads the new policy
                await self._notify(conn, f"run:{run_id}")
        self._cache.evict_run(run_id)
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

    async def note_egress(self, grant_id: str, line: str) -> None:
        async with _guard("note egress"), self._pool.acquire() as conn, conn.transaction():
            kept = await conn.fetchval(
                "INSERT INTO ironflow.auth_proxy_egress_notes (grant_id, line)"
                " SELECT id, $2 FROM ironflow.auth_proxy_grants WHERE id = $1 RETURNING seq",
                grant_id,
                line,
            )
            if kept is not None:  # the last EGRESS_NOTES_KEPT stay
                await conn.execute(
                    "DELETE FROM ironflow.auth_proxy_egress_notes WHERE grant_id = $1 AND seq < ("
                    " SELECT seq FROM ironflow.auth_proxy_egress_notes WHERE grant_id = $1"
                    " ORDER BY seq DESC OFFSET $2 LIMIT 1)",
                    grant_id,
                    registry.EGRESS_NOTES_KEPT - 1,
                )

    async def egress_notes(self, grant_id: str) -> list[str]:
        async with _guard("read egress notes"):
            rows = await self._pool.fetch(
                "SELECT line FROM (SELECT seq, line FROM ironflow.auth_proxy_egress_notes WHERE grant_id = $1"
                " ORDER BY seq DESC LIMIT $2) AS kept ORDER BY seq", grant_id, registry.EGRESS_NOTES_KEPT,
            )  # fmt: skip
        return [str(row["line"]) for row in rows]

    async def close(self) -> None:
        self._closed = True
        self._listening = False
        for task in (self._reconnect, self._keepalive):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._listener is not None:
            with contextlib.suppress(*_DB_ERRORS):
                await self._listener.close()
            self._listener = None
        await self._pool.close()


_RESEAL_ALL: Final = (
    "SELECT id, credential_kind, expires_at, encrypted_credential, nonce, key_version, seal_format"
    " FROM ironflow.auth_proxy_grants FOR UPDATE"
)
_RESEAL_LEGACY: Final = (
    "SELECT id, credential_kind, expires_at, encrypted_credential, nonce, key_version, seal_format"
    " FROM ironflow.auth_proxy_grants WHERE seal_format = 0 FOR UPDATE"
)


async def _reseal(conn: Any, ring: crypto.KeyRing, *, only_legacy: bool) -> RotationReport:
    """Re-seal rows under the active key with their associated data, in one transaction.

    ``only_legacy`` (at open) touches ``seal_format = 0`` rows only; ``rotate-keys`` also
    moves rows under an older key. Rows that do not open are counted and left alone.
    """
    resealed = current = missing_key = broken = 0
    async with _guard("reseal"), conn.transaction():
        rows = await conn.fetch(_RESEAL_LEGACY if only_legacy else _RESEAL_ALL)
        for row in rows:
            if row["seal_format"] == SEAL_FORMAT and row["key_version"] == ring.active_version:
                current += 1
                continue
            try:
                plain = ring.open(_sealed(row), _row_associated_data(row))
            except crypto.SealBroken:
                broken += 1
                continue
            except crypto.MissingKeyVersion:
                missing_key += 1
                continue
            sealed = ring.seal(plain, associated_data(row["id"], row["credential_kind"], row["expires_at"]))
            await conn.execute(
                "UPDATE ironflow.auth_proxy_grants SET encrypted_credential = $2, nonce = $3, key_version = $4,"
                " seal_format = $5, updated_at = NOW() WHERE id = $1",
                row["id"],
                sealed.ciphertext,
                sealed.nonce,
                sealed.key_version,
                SEAL_FORMAT,
            )
            resealed += 1
    return RotationReport(resealed, current, missing_key, broken)


async def rotate_keys(dsn: Secret, ring: crypto.KeyRing) -> RotationReport:
    """Re-seal every grant not under the active key; rows that do not open are counted, left alone."""
    async with _guard("connect"):
        conn = await asyncpg.connect(dsn.reveal(), timeout=_CONNECT_TIMEOUT_S)
    try:
        async with _guard("migrate"):
            await migrations.migrate(conn, COMPONENT, MIGRATIONS_PACKAGE)
        return await _reseal(conn, ring, only_legacy=False)
    finally:
        with contextlib.suppress(*_DB_ERRORS):
            await conn.close()
