"""A git host on loopback: git's own ``git http-backend`` behind HTTP Basic auth, as GitHub
and GitLab serve smart HTTP.

Why: a relay that breaks git (a dropped header, a re-encoded body, a chunked push) only
shows with the real git client on one side and the real git server on the other. Each
request is handed to ``git http-backend`` as CGI (RFC 3875): the body streamed in raw,
still compressed and framed as the client sent it (``CONTENT_LENGTH`` only when the client
gave one, as Apache does for a chunked body), and the CGI answer (``Status:``, headers,
body) streamed back.

Strict like a hosted forge: every request needs the configured Basic username and password
(else 401 with ``WWW-Authenticate``), only the smart endpoints exist (no dumb HTTP: 404), and
pushes are on for an authenticated user (``REMOTE_USER``). What each request carried is kept in
:attr:`GitServer.requests`, so a test can assert which credential arrived.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import os
import re
import ssl
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Final

from aiohttp import web

__all__ = ["GIT_ENV", "GitRequest", "GitServer", "git", "seed_forge"]

#: The smart-HTTP endpoints of a repository: the ref advertisement and the two RPCs.
_SMART: Final = re.compile(r"(/.+\.git)/(info/refs|git-upload-pack|git-receive-pack)")
_SERVICES: Final = frozenset({"git-upload-pack", "git-receive-pack"})
_CHUNK: Final = 64 * 1024
_MAX_CGI_HEAD: Final = 64 * 1024


@dataclass(frozen=True)
class GitRequest:
    """One request as the server received it; ``headers`` hold the credential, so they stay out of ``repr``."""

    method: str
    path: str
    service: str | None
    username: str | None
    authorized: bool
    content_encoding: str | None
    chunked: bool
    body_bytes: int
    status: int
    headers: tuple[tuple[str, str], ...] = field(repr=False)


#: A git that reads no user or system config, with a fixed identity for the tests' own commits.
GIT_ENV: Final = {
    "PATH": os.environ["PATH"],
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    **{
        f"GIT_{who}_{key}": "a" if key == "NAME" else "a@a"
        for who in ("AUTHOR", "COMMITTER")
        for key in ("NAME", "EMAIL")
    },
}


def git(*args: str, cwd: Path) -> str:
    """``git ARGS`` in ``cwd`` with :data:`GIT_ENV`; its stdout (a failure raises)."""
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


def seed_forge(root: Path, host: str, files: Mapping[str, str]) -> tuple[Path, Path]:
    """A bare ``root/forge/<host>/org/repo.git`` (what :class:`GitServer` serves from ``root/forge``)
    whose ``main`` holds one commit of ``files``, and the seed work tree that pushed it."""
    bare = root / "forge" / host / "org" / "repo.git"
    bare.parent.mkdir(parents=True)
    git("init", "-q", "--bare", "-b", "main", str(bare), cwd=root)
    seed = root / "seed"
    seed.mkdir()
    for name, text in files.items():
        (seed / name).write_text(text)
    git("init", "-q", "-b", "main", cwd=seed)
    git("add", "-A", cwd=seed)
    git("commit", "-qm", "start", cwd=seed)
    git("push", "-q", str(bare), "main", cwd=seed)
    return bare, seed


def _basic_credentials(header: str) -> tuple[str, str] | None:
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, colon, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if colon else None


async def _http_backend() -> Path:
    """git's own CGI program, where ``git --exec-path`` says this git keeps its helpers."""
    proc = await asyncio.create_subprocess_exec("git", "--exec-path", stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError("git --exec-path failed: is git installed?")
    return Path(out.decode().strip()) / "git-http-backend"


class GitServer:
    """Serves the bare repositories under ``root`` at ``{url}/<path under root>`` while open
    (``async with``); ``root/org/repo.git`` is cloned from ``{url}/org/repo.git``. With ``tls``
    (a server context whose certificate names localhost) the URL is ``https://localhost:PORT``."""

    def __init__(self, root: Path, *, username: str, password: str, tls: ssl.SSLContext | None = None) -> None:
        self.root = root
        self._tls = tls
        self._username = username
        self._password = password
        self.requests: list[GitRequest] = []
        #: What ``git http-backend`` wrote to stderr, per request that wrote anything.
        self.errors: list[str] = []
        self.url = ""
        self._backend = Path()
        self._runner: web.AppRunner | None = None

    @property
    def pushes(self) -> list[GitRequest]:
        """The receive-pack RPCs the backend answered (a large push's probe counts too); whether a
        ref moved is in the repository, not here."""
        return [r for r in self.requests if r.method == "POST" and r.service == "git-receive-pack" and r.status == 200]

    async def __aenter__(self) -> GitServer:
        self._backend = await _http_backend()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Raw bodies: a gzip-encoded fetch request reaches http-backend compressed, as from a web server.
        self._runner = web.AppRunner(app, auto_decompress=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._tls).start()
        scheme, host = ("https", "localhost") if self._tls else ("http", "127.0.0.1")  # a certificate names localhost
        self.url = f"{scheme}://{host}:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _record(
        self, request: web.Request, service: str | None, *, user: str | None, ok: bool, sent: int, status: int
    ) -> None:
        self.requests.append(
            GitRequest(
                method=request.method,
                path=request.path,
                service=service,
                username=user,
                authorized=ok,
                content_encoding=request.headers.get("Content-Encoding"),
                chunked="chunked" in request.headers.get("Transfer-Encoding", "").lower(),
                body_bytes=sent,
                status=status,
                headers=tuple(request.headers.items()),
            )
        )

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        matched = _SMART.fullmatch(request.path)
        endpoint = matched.group(2) if matched is not None else ""
        service = request.query.get("service") if endpoint == "info/refs" else endpoint or None
        credentials = _basic_credentials(request.headers.get("Authorization", ""))
        if credentials != (self._username, self._password):
            self._record(request, service, user=credentials[0] if credentials else None, ok=False, sent=0, status=401)
            challenge = {"WWW-Authenticate": 'Basic realm="git"'}
            return web.Response(status=401, text="Authentication failed\n", headers=challenge)
        rpc = request.method == "POST"
        if matched is None or service not in _SERVICES or rpc == (endpoint == "info/refs"):
            self._record(request, service, user=self._username, ok=True, sent=0, status=404)
            return web.Response(status=404, text="Not Found\n")
        return await self._cgi(request, service, self._username)

    def _environment(self, request: web.Request, user: str) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": f"HTTP/{request.version.major}.{request.version.minor}",
            "REQUEST_METHOD": request.method,
            "PATH_INFO": request.path,
            "QUERY_STRING": request.query_string,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "REMOTE_USER": user,  # an authenticated user may push (http.receivepack's default)
            "REMOTE_ADDR": request.remote or "",
        }
        if request.content_length is not None:
            env["CONTENT_LENGTH"] = str(request.content_length)
        for header, name in (("Content-Encoding", "HTTP_CONTENT_ENCODING"), ("Git-Protocol", "HTTP_GIT_PROTOCOL")):
            if header in request.headers:
                env[name] = request.headers[header]
        return env

    async def _cgi(self, request: web.Request, service: str | None, user: str) -> web.StreamResponse:
        proc = await asyncio.create_subprocess_exec(
            str(self._backend),
            env=self._environment(request, user),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        feeding = asyncio.ensure_future(_feed(request, proc.stdin))
        complaints = asyncio.ensure_future(proc.stderr.read())
        answered = 502  # until the backend's own answer has been sent on
        recorded = False
        try:
            status, headers, rest = await _cgi_head(proc.stdout)
            response = web.StreamResponse(status=status, headers=headers)
            await response.prepare(request)
            answered = status
            if rest:
                await response.write(rest)
            while chunk := await proc.stdout.read(_CHUNK):
                await response.write(chunk)
            await proc.wait()  # a push is done only once the backend has exited
            # Recorded before the answer ends: a client that has its whole answer finds it in requests.
            await self._settle(request, service, user, feeding, complaints, answered)
            recorded = True
            await response.write_eof()
            return response
        finally:
            if proc.returncode is None:  # the answer failed midway: stop the backend
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            if not recorded:
                await self._settle(request, service, user, feeding, complaints, answered)

    async def _settle(
        self,
        request: web.Request,
        service: str | None,
        user: str,
        feeding: asyncio.Future[int],
        complaints: asyncio.Future[bytes],
        status: int,
    ) -> None:
        sent = await feeding
        if stderr := (await complaints).decode(errors="replace").strip():
            self.errors.append(stderr)
        self._record(request, service, user=user, ok=True, sent=sent, status=status)


async def _feed(request: web.Request, stdin: asyncio.StreamWriter) -> int:
    """Copy the request body to the backend as it arrives (raw: still compressed); the byte count."""
    sent = 0
    try:
        while chunk := await request.content.read(_CHUNK):
            stdin.write(chunk)
            sent += len(chunk)
            await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the backend stopped reading: its answer says why
    finally:
        stdin.close()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await stdin.wait_closed()
    return sent


async def _cgi_head(stdout: asyncio.StreamReader) -> tuple[int, list[tuple[str, str]], bytes]:
    """The CGI response's status and headers (``Status:`` read, others passed on), and body bytes read past them."""
    buffered = b""
    while not (end := re.search(rb"\r?\n\r?\n", buffered)):
        chunk = await stdout.read(_CHUNK)
        if not chunk or len(buffered) > _MAX_CGI_HEAD:
            raise web.HTTPBadGateway(text="git http-backend sent no complete CGI header\n")
        buffered += chunk
    status = 200
    headers: list[tuple[str, str]] = []
    for line in buffered[: end.start()].decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() == "status":
            status = int(value.strip().split(" ", 1)[0])
        else:
            headers.append((name.strip(), value.strip()))
    return status, headers, buffered[end.end() :]
