"""The in-memory registry shared by several worker processes of one proxy, over a unix socket.

``--workers N`` without PostgreSQL: the parent process keeps the only
:class:`~ironflow.auth_proxy.registry.MemoryRegistry` and serves it on a unix socket in
a private (0700) directory; each worker uses a :class:`HubRegistry` that caches
resolved grants and drops them the moment the hub announces a revocation. The hub
pushes the announcement to every worker *before* it answers the revoking call, so once
the admin API has said 204, every worker has the eviction in its socket buffer.

Wire format: one JSON object per line. Requests ``{"id", "op", "args"}``, answers
``{"id", "ok"}`` or ``{"id", "error"}``, announcements ``{"event": "evict", "ids"}`` (grants
revoked, or whose egress policy changed: the next resolve asks the hub).
Grants cross the socket with their credential: the socket never leaves the host and
its directory is readable by the proxy's uid only. Nothing here logs a grant.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import AsyncIterator
from typing import Any, Final

from ironflow.auth_proxy import registry, tokens
from ironflow.egress import EgressPolicy

__all__ = ["HubRegistry", "serve_hub"]

_LIMIT: Final = 1 << 20


async def _answer(grants: registry.MemoryRegistry, op: str, args: dict[str, Any]) -> Any:
    if op == "resolve":
        found = await grants.resolve(args["id"], args["now"])
        if isinstance(found, registry.Resolution):
            return {"resolution": found.value}
        return {"grant": tokens.grant_to_wire(found)}
    if op == "insert":
        await grants.insert(tokens.grant_from_wire(args["grant"]))
        return None
    if op == "revoke":
        return await grants.revoke(args["id"])
    if op == "revoke_run":
        return await grants.revoke_run(args["run_id"])
    if op == "set_egress":
        policy = None if args["egress"] is None else EgressPolicy.from_json(args["egress"])
        return await grants.set_egress(args["run_id"], args.get("step"), policy)
    if op == "purge_expired":
        return await grants.purge_expired(args["now"])
    if op == "count":
        return await grants.count()
    if op == "take_request":
        usage = await grants.take_request(args["id"])
        return [usage.requests, usage.output_tokens]
    if op == "add_output_tokens":
        await grants.add_output_tokens(args["id"], args["count"])
        return None
    if op == "note_egress":
        await grants.note_egress(args["id"], str(args["line"]))
        return None
    if op == "egress_notes":
        return await grants.egress_notes(args["id"])
    raise ValueError(f"unknown hub operation {op!r}")


@contextlib.asynccontextmanager
async def serve_hub(socket_path: str, grants: registry.MemoryRegistry | None = None) -> AsyncIterator[str]:
    """Serve one memory registry on ``socket_path`` until the block ends."""
    shared = grants if grants is not None else registry.MemoryRegistry()
    writers: set[asyncio.StreamWriter] = set()

    async def announce(ids: list[str]) -> None:
        line = json.dumps({"event": "evict", "ids": ids}).encode() + b"\n"
        for writer in list(writers):
            with contextlib.suppress(ConnectionError):
                writer.write(line)
                await writer.drain()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        try:
            while line := await reader.readline():
                request = json.loads(line)
                op, args = request["op"], request.get("args", {})
                if op == "revoke_run":
                    await announce(shared.run_grant_ids(args["run_id"]))
                elif op == "revoke":
                    await announce([args["id"]])
                elif op == "set_egress":  # the next resolve reads the changed grant from the hub
                    await announce(shared.changed_grant_ids(args["run_id"], args.get("step")))
                try:
                    reply = {"id": request["id"], "ok": await _answer(shared, op, args)}
                except (KeyError, TypeError, ValueError) as exc:
                    reply = {"id": request["id"], "error": type(exc).__name__}
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, ValueError):
            pass
        finally:
            writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    os.makedirs(os.path.dirname(socket_path), mode=0o700, exist_ok=True)
    server = await asyncio.start_unix_server(client, socket_path, limit=_LIMIT)
    os.chmod(socket_path, 0o600)
    try:
        yield socket_path
    finally:
        server.close()
        for writer in list(writers):
            writer.close()
        await server.wait_closed()


class HubRegistry:
    """A worker's view of the hub: a grant cache kept honest by revocation announcements."""

    def __init__(self, socket_path: str, *, cache_ttl_s: float = 30.0) -> None:
        self._path = socket_path
        self._cache = registry.GrantCache(cache_ttl_s)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connect_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"HubRegistry(cached={len(self._cache)}, connected={self._writer is not None})"

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connect_lock:
            if self._writer is not None:
                return self._writer
            try:
                reader, writer = await asyncio.open_unix_connection(self._path, limit=_LIMIT)
            except OSError as exc:
                raise registry.RegistryUnavailable("the registry hub is unreachable") from exc
            self._writer = writer
            self._cache.enabled = True
            self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))
            return writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                message = json.loads(line)
                if message.get("event") == "evict":
                    self._cache.evict(message["ids"])
                    continue
                future = self._pending.pop(message["id"], None)
                if future is not None and not future.done():
                    future.set_result(message)
        except (ConnectionError, ValueError):
            pass
        finally:
            self._lost()

    def _lost(self) -> None:
        # Without the hub's announcements the cache could hide a revocation: drop it.
        self._cache.enabled = False
        self._cache.clear()
        self._writer = None
        for future in self._pending.values():
            if not future.done():
                future.set_exception(registry.RegistryUnavailable("the registry hub went away"))
        self._pending.clear()

    async def _call(self, op: str, **args: Any) -> Any:
        writer = await self._connect()
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            writer.write(json.dumps({"id": request_id, "op": op, "args": args}).encode() + b"\n")
            await writer.drain()
        except ConnectionError as exc:
            self._pending.pop(request_id, None)
            raise registry.RegistryUnavailable("the registry hub went away") from exc
        message = await future
        if "error" in message:
            raise registry.RegistryUnavailable(f"the registry hub refused {op}")
        return message["ok"]

    async def insert(self, grant: tokens.Grant) -> None:
        await self._call("insert", grant=tokens.grant_to_wire(grant))

    async def resolve(self, grant_id: str, now: int) -> tokens.Grant | registry.Resolution:
        return await self._cache.read_through(grant_id, now, lambda: self._resolve_at_hub(grant_id, now))

    async def _resolve_at_hub(self, grant_id: str, now: int) -> tokens.Grant | registry.Resolution:
        answer = await self._call("resolve", id=grant_id, now=now)
        if "resolution" in answer:
            return registry.Resolution(answer["resolution"])
        return tokens.grant_from_wire(answer["grant"])

    async def revoke(self, grant_id: str) -> bool:
        self._cache.evict([grant_id])
        return bool(await self._call("revoke", id=grant_id))

    async def revoke_run(self, run_id: str) -> int:
        return int(await self._call("revoke_run", run_id=run_id))

    async def set_egress(self, run_id: str, step: str | None, policy: EgressPolicy | None) -> int:
        self._cache.evict_run(run_id)
        wire = None if policy is None else policy.to_json()
        return int(await self._call("set_egress", run_id=run_id, step=step, egress=wire))

    async def purge_expired(self, now: int) -> int:
        self._cache.drop_stale(now)
        return int(await self._call("purge_expired", now=now))

    async def count(self) -> int:
        return int(await self._call("count"))

    async def take_request(self, grant_id: str) -> registry.Usage:
        requests, output_tokens = await self._call("take_request", id=grant_id)
        return registry.Usage(int(requests), int(output_tokens))

    async def add_output_tokens(self, grant_id: str, count: int) -> None:
        await self._call("add_output_tokens", id=grant_id, count=count)

    async def note_egress(self, grant_id: str, line: str) -> None:
        await self._call("note_egress", id=grant_id, line=line)

    async def egress_notes(self, grant_id: str) -> list[str]:
        return [str(line) for line in await self._call("egress_notes", id=grant_id)]

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
            self._reader_task = None
