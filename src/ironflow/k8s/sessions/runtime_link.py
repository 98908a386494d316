"""A session's runtime over HTTP at its pod's address, with a token of this process (I/O).

A session pod that runs the runtime as its main process (:mod:`ironflow.k8s.sessions.runtime_pod`)
is reached at ``http://podIP:8888``: no exec per request, no Python start per command. Each
process that holds the session makes a token of its own and delivers it with one ``pods/exec``
into the runtime's FIFO, so a second process (a reattach) needs only the RBAC to exec into the
pod, and no token is ever written to an API object. :func:`link` then checks, with that token,
that the runtime answers from here.

Which path a session takes (``transport``): ``auto`` uses HTTP when the pod runs the runtime and
its address answers from this process, else the exec bridge (a pod without the runtime, kwok,
a host outside the cluster's network); ``http`` refuses the session instead of falling back;
``exec`` never tries HTTP. The token is a header value only, never in a message or a repr.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import typing
from collections.abc import Callable
from typing import Final, Literal, cast

import aiohttp

from ironflow import errors
from ironflow.k8s.sessions import runtime_pod
from ironflow.kube import api as kube
from ironflow.secrets import Secret
from ironflow.sessions.client import RuntimeClient

__all__ = ["TRANSPORTS", "RuntimeLink", "Transport", "check_transport", "link"]

log = logging.getLogger("ironflow.k8s")

Transport = Literal["auto", "http", "exec"]
TRANSPORTS: Final = typing.get_args(Transport)
#: How long a connection to the pod's address may take before ``auto`` falls back to exec.
_CONNECT_S: Final = 2.0
#: How long the runtime may take to read its token from the FIFO once delivered (503 until then).
_TAKEN_S: Final = 5.0


def check_transport(transport: str) -> Transport:
    """The transport named, or a ConfigError naming the choices."""
    for known in typing.get_args(Transport):
        if transport == known:
            return cast(Transport, known)
    raise errors.ConfigError(f"session transport '{transport}' is not one of {', '.join(TRANSPORTS)}")


class RuntimeLink:
    """Where a held session's runtime answers, and this process's token for it."""

    def __init__(self, base_url: str, token: Secret) -> None:
        self.base_url, self.token = base_url, token

    def __repr__(self) -> str:
        return f"RuntimeLink({self.base_url!r})"

    def client(
        self, *, activity: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None
    ) -> RuntimeClient:
        return RuntimeClient(
            base_url=self.base_url, headers={"Authorization": f"Bearer {self.token.reveal()}"}, activity=activity
        )

    def idle_for(self) -> float:
        """Always 0: the runtime itself ends once idle past the session's limit (its token line said it)."""
        return 0.0

    async def answers(self) -> bool:
        """Whether the runtime answers its probe (``GET /`` with no token) at the address."""
        return await self._status({}) == 200

    async def _status(self, headers: dict[str, str]) -> int | None:
        """The status of ``GET /`` (None: the address did not answer from here)."""
        timeout = aiohttp.ClientTimeout(total=10, sock_connect=_CONNECT_S)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.get(self.base_url + "/", headers=headers) as got,
            ):
                return got.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def admitted(self) -> int | None:
        """200 once the runtime took the token (it reads the FIFO on its own thread: 503 until then),
        else the status it kept answering; None when the address does not answer from here."""
        headers = {"Authorization": f"Bearer {self.token.reveal()}"}
        deadline = time.monotonic() + _TAKEN_S
        while (status := await self._status(headers)) == 503 and time.monotonic() < deadline:  # noqa: ASYNC110 - the pod's state
            await asyncio.sleep(0.02)
        return status

    async def aclose(self) -> None:
        """Nothing is held open here: each handle's client is its own."""


async def link(
    api: kube.KubeApi,
    namespace: str,
    pod: str,
    container: str,
    address: str,
    *,
    transport: Transport,
    python: str,
    workspace: str | None,
    idle_timeout: float | None,
    max_upload_bytes: int,
) -> RuntimeLink | None:
    """Deliver a new token to the pod's runtime and check it answers from here; None: use exec.

    Raises:
        SandboxError: ``transport="http"`` and the runtime cannot be used; or it refused the token.
        KubeNotFound: the pod is gone.
    """
    token = Secret(secrets.token_urlsafe(32))
    line = runtime_pod.token_line(
        token.reveal(), workspace=workspace, idle_timeout=idle_timeout, max_upload_bytes=max_upload_bytes
    )
    try:
        result = await api.exec(
            namespace, pod, runtime_pod.delivery_command(len(line), python=python), container=container, stdin=line
        )
    except errors.KubeNotFound:
        raise
    except errors.KubernetesError as exc:  # no Python to deliver with: the exec path says so its own way
        _fall_back(transport, f"the token delivery to session pod {namespace}/{pod} failed: {exc}")
        return None
    if not runtime_pod.delivered(result.stdout):
        _fall_back(transport, f"session pod {namespace}/{pod} runs no session runtime")
        return None
    found = RuntimeLink(f"http://{address}", token)
    status = await found.admitted()
    if status is None:
        _fall_back(transport, f"the runtime of session pod {namespace}/{pod} does not answer at {address} from here")
        return None
    if status == 401:
        raise errors.SandboxError(f"the runtime of session pod {namespace}/{pod} answered 401 to its own token")
    if status != 200:  # something else answers at that address from here (no route into the cluster)
        _fall_back(transport, f"{address} answers {status} from here, not session pod {namespace}/{pod}'s runtime")
        return None
    return found


def _fall_back(transport: Transport, why: str) -> None:
    """Say why the session goes by exec; refused instead under ``transport="http"``."""
    if transport == "http":
        raise errors.SandboxError(f"{why} (session transport 'http': use 'auto' to fall back to exec)")
    log.info("%s: each request goes by exec", why)
