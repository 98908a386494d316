"""The async client of a session's runtime (:mod:`ironflow.sandbox_runtime.server`), and the
session handle built on it: ``sandbox.commands`` (:mod:`~ironflow.sessions.commands`) and ``sandbox.files``.

It speaks the ironflow extension (``/ironflow/v1/``), either straight to the runtime's unix
socket with the session's own token, or through ``ironflow sandbox serve`` with the
server's token and ``X-Sandbox-ID``: the same handle for both, and for any backend that
serves the same runtime. A token is a header value only: never in a message or a repr.
Command streams and JSON calls go over :mod:`~ironflow.sessions.socket_link` (the socket, or a
plain-HTTP server); aiohttp loads for file transfers and an HTTPS server only, so ``ironflow
sandbox exec`` starts without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, Final

from ironflow import errors
from ironflow.sessions import replies, socket_link, untar
from ironflow.sessions.commands import AsyncCommands, Callback, CommandHandle
from ironflow.sessions.values import CommandEvent, Exit, FileEntry, Output, SessionInfo, WatchEvent

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "DEFAULT_MAX_TREE_BYTES",
    "MAX_JSON_BYTES",
    "AsyncCommands",
    "AsyncFiles",
    "AsyncSandbox",
    "Callback",
    "CommandHandle",
    "RuntimeClient",
]

#: The most a directory copy (tar stream) may hold, either way, unless the caller says otherwise.
DEFAULT_MAX_TREE_BYTES: Final = 1 << 30
#: The largest JSON answer read from a session (a listing of some hundred thousand entries).
MAX_JSON_BYTES: Final = 64 << 20
_EXT: Final = "/ironflow/v1"
_CHUNK: Final = 65536


#: A request's body as the link sends it: its bytes and their content type.
_Body = tuple[bytes, str]


def _link(unix_path: str | None, base: str, headers: Mapping[str, str]) -> tuple[socket_link.SocketLink | None, str]:
    """The hand-written link to the runtime's socket or a plain-HTTP server, and the server URL's path
    (each request's target starts with it); none for HTTPS (aiohttp's TLS carries every request)."""
    if unix_path:
        return socket_link.SocketLink(unix_path, headers), ""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme != "http" or not parts.hostname:
        return None, ""
    return socket_link.SocketLink((parts.hostname, parts.port or 80), headers), parts.path.rstrip("/")


def _link_body(kwargs: Mapping[str, Any]) -> _Body | None:
    """The body of a JSON call as the link sends it (``json=``, bytes ``data=`` or none); None for one
    only aiohttp sends (a streamed upload)."""
    if not kwargs:
        return b"", "application/json"
    if kwargs.keys() == {"json"}:
        return json.dumps(kwargs["json"]).encode(), "application/json"
    if kwargs.keys() == {"data"} and isinstance(kwargs["data"], bytes):
        return kwargs["data"], "application/octet-stream"
    return None


def _quote(path: str) -> str:
    return urllib.parse.quote(path, safe="")


def _event(line: bytes) -> CommandEvent | None:
    """One event line; SandboxError when it is not one (the session's side is not trusted)."""
    try:
        event = replies.command_event(line)
    except (ValueError, TypeError, OverflowError) as exc:
        raise errors.SandboxError(f"the sandbox sent a malformed command event: {type(exc).__name__}") from None
    if event is None:
        return None
    kind, value, timed_out = event
    if kind == "exit":
        return Exit(int(value), timed_out)
    return Output("stdout" if kind == "stdout" else "stderr", str(value))


def _watch_event(line: bytes) -> WatchEvent | None:
    """One line of a watch stream; SandboxError when it is no event (the session's side is not trusted)."""
    try:
        doc = json.loads(line)
        if not isinstance(doc, Mapping):
            raise TypeError("not an object")
        return WatchEvent.from_json(doc)
    except (ValueError, TypeError) as exc:
        raise errors.SandboxError(f"the sandbox sent a malformed watch event: {type(exc).__name__}") from None


class RuntimeClient:
    """HTTP to one session's runtime. ``unix_path``: its socket; else ``base_url`` (a server).

    Args:
        headers: sent on every request (``Authorization``, and ``X-Sandbox-ID`` through a server).
    """

    def __init__(
        self,
        *,
        headers: Mapping[str, str],
        unix_path: str | None = None,
        base_url: str = "",
        activity: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
    ) -> None:
        #: Around each request (a local session's: resume it first, keep it from idle suspend).
        self._activity = activity or contextlib.nullcontext
        self._unix_path, self._headers = unix_path, dict(headers)
        self._base = "http://sandbox" if unix_path else base_url.rstrip("/")
        self._name = "the sandbox runtime" if unix_path else f"the sandbox server at {self._base}"
        #: command streams and JSON calls: by hand, on kept connections (a command's round trip)
        self._link, self._prefix = _link(unix_path, self._base, headers)
        self._http: aiohttp.ClientSession | None = None  # made on first use: see the module's docstring

    def __repr__(self) -> str:
        return f"RuntimeClient({self._base!r})"  # never the headers: they hold the token

    async def aclose(self) -> None:
        try:
            if self._link is not None:
                await self._link.aclose()
        finally:
            if self._http is not None:
                await self._http.close()

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            import aiohttp

            path = self._unix_path
            connector = aiohttp.UnixConnector(path=path) if path else aiohttp.TCPConnector()
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
            self._http = aiohttp.ClientSession(connector=connector, headers=self._headers, timeout=timeout)
        return self._http

    async def request(self, method: str, path: str, **kwargs: Any) -> aiohttp.ClientResponse:
        """The response of a 2xx answer (the caller releases it); errors by status.

        Raises:
            FileNotFoundError: 404 on a path. PermissionError: 403 (the path leaves the workspace).
            SessionNotFound: the server knows no such session. ConfigError: 400, 401, 409, 413.
            SandboxError: anything else.
        """
        import aiohttp
        from yarl import URL

        try:
            async with self._activity():
                # encoded: quoted already, and a '..' reaches the runtime (a 403) as sent, not resolved here
                response = await self._session().request(method, URL(self._base + path, encoded=True), **kwargs)
        except aiohttp.ClientError as exc:
            raise errors.SandboxError(f"{self._name} could not be reached: {type(exc).__name__}: {exc}") from None
        if response.status < 300:
            return response
        said: bytes | None = None
        try:
            with contextlib.suppress(aiohttp.ClientError):  # a refusal broken off is still the refusal
                said = await replies.at_most(response.content.iter_chunked(_CHUNK), replies.MAX_ERROR_BYTES, cut=True)
        finally:
            response.release()
        raise self._refusal(response.status, (said or b"").decode(errors="replace")[:500])

    def _refusal(self, status: int, text: str) -> Exception:
        return replies.refusal(status, text, self._name)

    @contextlib.contextmanager
    def answer(self, what: str = "its answer") -> Iterator[None]:
        """Around the read of an answer's body (``what`` names it in the error): a runtime that ends
        mid-answer (its session was stopped or closed) is a SandboxError, as one that cannot be reached is."""
        import aiohttp  # loaded already: an answer read here came from aiohttp's request

        try:
            yield
        except aiohttp.ClientError as exc:
            raise errors.SandboxError(f"{self._name} broke off {what}: {type(exc).__name__}") from None

    async def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON answer of a call (``json=`` or bytes ``data=`` its body); errors as :meth:`request`'s."""
        body = _link_body(kwargs) if self._link is not None else None
        if body is None:
            response = await self.request(method, path, **kwargs)
            async with response:
                with self.answer():
                    data = await replies.at_most(response.content.iter_chunked(_CHUNK), MAX_JSON_BYTES)
        else:
            async with contextlib.aclosing(self._pieces(method, path, body)) as pieces:
                data = await replies.at_most(pieces, MAX_JSON_BYTES)
        if data is None:
            raise errors.SandboxError(f"{self._name} answered with JSON over {MAX_JSON_BYTES} bytes")
        try:
            return json.loads(data) if data.strip() else None
        except ValueError:
            raise errors.SandboxError(f"{self._name} answered with a body that is not JSON") from None

    async def events(
        self, method: str, path: str, spec: Mapping[str, Any] | None = None
    ) -> AsyncIterator[CommandEvent]:
        """The newline-delimited JSON events of a command stream (``spec``: its JSON body), as they arrive."""
        async with contextlib.aclosing(self.lines(method, path, spec)) as lines:
            async for line in lines:
                if (event := _event(line)) is not None:
                    yield event

    async def lines(self, method: str, path: str, spec: Mapping[str, Any] | None = None) -> AsyncGenerator[bytes, None]:
        """The non-blank lines of a newline-delimited stream, as they arrive (each at most 1 MiB)."""
        lines = replies.LineSplitter(replies.MAX_EVENT_LINE_BYTES)
        body = None if spec is None else (json.dumps(spec).encode(), "application/json")
        async with contextlib.aclosing(self._pieces(method, path, body)) as pieces:
            async for data in pieces:
                for line in lines.feed(data):
                    yield line
        for line in lines.rest():
            yield line

    async def _pieces(self, method: str, path: str, body: _Body | None) -> AsyncGenerator[bytes, None]:
        """An answer's body as it arrives: by :mod:`~ironflow.sessions.socket_link` where there is a
        link, else by aiohttp (``body``: the request's bytes and content type)."""
        async with self._activity(), contextlib.aclosing(self._raw_pieces(method, path, body)) as pieces:
            async for data in pieces:
                yield data

    async def _raw_pieces(self, method: str, path: str, body: _Body | None) -> AsyncGenerator[bytes, None]:
        if self._link is None:
            sent = {} if body is None else {"data": body[0], "headers": {"Content-Type": body[1]}}
            response = await self.request(method, path, **sent)
            async with response:
                with self.answer():  # the events read so far were given; a break is the command's end
                    async for data in response.content.iter_chunked(_CHUNK):
                        yield data
            return
        data, content_type = body or (b"", "application/json")
        try:
            async with contextlib.aclosing(
                self._link.stream(method, self._prefix + path, data, content_type=content_type)
            ) as it:
                async for data in it:
                    yield data
        except socket_link.Refused as exc:
            raise self._refusal(exc.status, exc.body.decode(errors="replace")[:500]) from None
        except socket_link.LinkError as exc:
            if exc.reached:
                raise errors.SandboxError(f"{self._name} broke off its answer: {exc}") from None
            raise errors.SandboxError(f"{self._name} could not be reached: {exc}: {exc.cause}") from None


class AsyncFiles:
    """``sandbox.files``: paths relative to the workspace, never outside it (PermissionError)."""

    def __init__(self, client: RuntimeClient) -> None:
        self._client = client

    async def write(self, path: str, data: bytes | str | BinaryIO) -> int:
        """Write a whole file (parent directories made); returns its size. A binary file
        object is streamed from where it stands, never read whole."""
        body: Any = data.encode() if isinstance(data, str) else data if isinstance(data, bytes) else _chunks(data)
        doc = await self._client.json("PUT", f"{_EXT}/files/{_quote(path)}?mkdir=1", data=body)
        return int(doc["size"])

    async def read(self, path: str, *, max_bytes: int = DEFAULT_MAX_TREE_BYTES) -> bytes:
        """A whole file, held in memory: the sandbox's side says how big, so past ``max_bytes`` it is
        a ConfigError (:meth:`read_to` streams a file of any size)."""
        response = await self._client.request("GET", f"/download/{_quote(path)}")
        async with response:
            with self._client.answer():
                data = await replies.at_most(response.content.iter_chunked(_CHUNK), max_bytes)
        if data is None:
            raise errors.ConfigError(f"'{path}' is over the {max_bytes} byte limit (read_to streams it)")
        return data

    async def read_to(self, path: str, dest: BinaryIO) -> int:
        """Stream a file into ``dest`` (a binary file object); returns its size."""
        response = await self._client.request("GET", f"/download/{_quote(path)}")
        size = 0
        async with response:
            with self._client.answer():
                async for data in response.content.iter_chunked(_CHUNK):
                    dest.write(data)
                    size += len(data)
        return size

    async def list(self, path: str = ".") -> list[FileEntry]:
        entries = await self._client.json("GET", f"/list/{_quote(path)}")
        return [FileEntry(str(e["name"]), int(e["size"]), e["type"], float(e["mod_time"])) for e in entries]

    async def exists(self, path: str) -> bool:
        return bool((await self._client.json("GET", f"/exists/{_quote(path)}"))["exists"])

    async def watch(
        self, path: str = ".", *, recursive: bool = False, max_events: int | None = None
    ) -> AsyncGenerator[WatchEvent, None]:
        """The changes under the directory ``path`` as they happen (``recursive``: its whole tree), until
        the caller stops iterating or the session ends (then SandboxError). ``max_events``: how many the
        runtime keeps waiting for a slow caller before it drops them (an ``overflow`` event says how many).

        Raises:
            PermissionError: ``path`` leaves the workspace. FileNotFoundError: it is no directory.
        """
        query = "?recursive=1" if recursive else "?recursive=0"
        if max_events is not None:
            query += f"&max_events={int(max_events)}"
        async with contextlib.aclosing(self._client.lines("GET", f"{_EXT}/watch/{_quote(path)}{query}")) as lines:
            async for line in lines:
                if (event := _watch_event(line)) is not None:
                    yield event

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file, or a directory (with ``recursive``, its contents too).

        Raises:
            FileNotFoundError: nothing is there.
        """
        if not await self.exists(path):  # also refuses a path outside the workspace
            raise FileNotFoundError(f"File not found: {path}")
        await self._command(["rm", "-r" if recursive else "-d", "--", path])

    async def mkdir(self, path: str) -> None:
        """Make a directory and its parents (no error when it exists)."""
        await self.exists(path)  # refuses a path outside the workspace
        await self._command(["mkdir", "-p", "--", path])

    async def _command(self, argv: Sequence[str]) -> None:
        result = await AsyncCommands(self._client).run(argv)
        if result.exit_code != 0:
            raise errors.SandboxError(f"{argv[0]} failed in the sandbox: {errors.truncate(result.stderr.strip(), 300)}")

    async def upload_dir(self, local_dir: str, path: str, *, max_bytes: int = DEFAULT_MAX_TREE_BYTES) -> int:
        """Copy a host directory's contents into ``path`` (a tar stream); returns the entries.
        Regular files, directories and relative symlinks inside the tree, as :meth:`download_dir`
        takes them.

        Raises:
            ConfigError: the tar stream would pass ``max_bytes``, an entry is a special file
            or a symlink that leaves the tree (named), or an entry cannot be read.
        """
        if not os.path.isdir(local_dir):  # noqa: ASYNC240 - one stat before the copy
            raise errors.ConfigError(f"'{local_dir}' is not a directory")
        with tempfile.TemporaryFile() as spool:
            try:
                await asyncio.to_thread(untar.pack, local_dir, spool, max_bytes=max_bytes)  # no stall of the loop
            except OSError as exc:
                raise errors.ConfigError(f"cannot copy '{local_dir}': {_os_error(exc)}") from None
            spool.seek(0)
            doc = await self._client.json("PUT", f"{_EXT}/tar/{_quote(path)}", data=_chunks(spool))
        return int(doc["entries"])

    async def download_dir(
        self,
        path: str,
        local_dir: str,
        *,
        max_bytes: int = DEFAULT_MAX_TREE_BYTES,
        max_entries: int = untar.DEFAULT_MAX_ENTRIES,
    ) -> int:
        """Copy ``path``'s contents into a host directory (made if missing); returns the entries.

        The stream is the sandbox's word, so it is unpacked by :mod:`~ironflow.sessions.untar`:
        regular files, directories and symlinks that stay inside the tree (made last), nothing
        outside ``local_dir`` and nothing through a symlink in it, and every check before the
        first write.

        Raises:
            ConfigError: the tar stream passes ``max_bytes`` or ``max_entries``, a member is
            refused (named; nothing is extracted then), or ``local_dir`` cannot be written.
        """
        with tempfile.TemporaryFile() as spool:
            response = await self._client.request("GET", f"{_EXT}/tar/{_quote(path)}")
            async with response:
                size = 0
                with self._client.answer(f"the tar stream of '{path}'"):  # a file it could not read, say
                    async for data in response.content.iter_chunked(_CHUNK):
                        size += len(data)
                        if size > max_bytes:
                            raise errors.ConfigError(f"'{path}' is over the {max_bytes} byte limit as a tar stream")
                        spool.write(data)
            try:
                return await asyncio.to_thread(
                    untar.extract, spool, local_dir, max_bytes=max_bytes, max_entries=max_entries
                )
            except untar.ArchiveRefused as exc:
                raise errors.ConfigError(f"refused the copy of '{path}' into '{local_dir}': {exc.message}") from None
            except OSError as exc:
                raise errors.ConfigError(f"cannot write into '{local_dir}': {_os_error(exc)}") from None


def _os_error(exc: OSError) -> str:
    """An OSError in words, with its file name when it has one (never a bytes repr)."""
    name = os.fsdecode(exc.filename) if exc.filename is not None else ""
    return f"{exc.strerror or exc}: {name}" if name else str(exc.strerror or exc)


async def _chunks(spool: Any) -> AsyncIterator[bytes]:
    while data := spool.read(_CHUNK):
        yield data


class AsyncSandbox:
    """An open session: ``commands``, ``files``; ``async with`` closes it.

    ``close()`` ends the session (every process in it dies); ``disconnect()`` only drops
    this handle's connection and leaves the session to its TTL, for a later reattach.
    """

    def __init__(self, info: SessionInfo, client: RuntimeClient, closer: Callable[[], Awaitable[None]]) -> None:
        self.info = info
        self.id = info.id
        self._client, self._closer = client, closer
        self.commands = AsyncCommands(client)
        self.files = AsyncFiles(client)

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, backend={self.info.backend!r})"

    async def disconnect(self) -> None:
        await self._client.aclose()

    async def close(self) -> None:
        try:
            await self._client.aclose()
        finally:
            await self._closer()

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
