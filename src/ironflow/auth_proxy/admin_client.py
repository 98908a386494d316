"""Worker side of the auth proxy: the admin client that issues and revokes tokens over HTTP.

The worker holds the credential and the admin key; the pod gets only the opaque token.
Which credential a token stands for, and the token's lifecycle around a step, live in
:mod:`ironflow.auth_proxy.issuing`. ``AdminClient`` satisfies its ``TokenIssuer`` hook
(``issue(run_id, step, expires_at) -> (token_id, token)``, ``revoke``, ``revoke_run``).
Its errors are :class:`~ironflow.errors.AuthProxyError` and never hold the URL, the
admin key, the credential or the token; admin error bodies are cut to 200 characters.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Final, NamedTuple
from urllib.parse import quote, urlsplit

import aiohttp

from ironflow import egress as egress_policy
from ironflow import settings_file
from ironflow.auth_proxy import tokens
from ironflow.auth_proxy.issuing import Credential, TokenIssuer, resolve_credential
from ironflow.errors import AuthProxyError, MissingCredential
from ironflow.secrets import Secret

__all__ = [
    "ADMIN_KEY_ENV",
    "AdminClient",
    "IssuedToken",
    "admin_key_from",
    "issuer_for",
]

ADMIN_KEY_ENV: Final = "IRONFLOW_AUTH_PROXY_ADMIN_KEY"
_TIMEOUT_S: Final = 30.0


def admin_key_from(value: Secret | str | None, env: Mapping[str, str] | None = None) -> Secret:
    """The builder's admin key, else ``IRONFLOW_AUTH_PROXY_ADMIN_KEY``; trimmed."""
    if value is not None:
        key = (value.reveal() if isinstance(value, Secret) else value).strip()
        if key:
            return Secret(key)
    source = os.environ if env is None else env
    key = source.get(ADMIN_KEY_ENV, "").strip()
    if not key:
        raise MissingCredential(f"auth_proxy requires {ADMIN_KEY_ENV}")
    return Secret(key)


@contextlib.asynccontextmanager
async def issuer_for(
    issuer: TokenIssuer | None, base_url: str, admin_key: Secret | str | None = None
) -> AsyncIterator[TokenIssuer]:
    """``issuer`` when given, else an admin client of the proxy at ``base_url``, closed when the block ends."""
    if issuer is not None:
        yield issuer
        return
    async with AdminClient(base_url, admin_key) as admin:
        yield admin


class IssuedToken(NamedTuple):
    """``(token_id, token)``: log ``token_id[:12]``, hand ``token`` only to the pod."""

    id: str
    token: Secret

    @property
    def short_id(self) -> str:
        return self.id[:12]


class AdminClient:
    """Issue and revoke tokens through the proxy's admin API (30 s per call).

    Use ``async with AdminClient(url, key) as admin:`` or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        admin_key: Secret | str | None = None,
        *,
        credential: Credential | None = None,
        unix_socket: str | None = None,
        timeout_s: float = _TIMEOUT_S,
    ) -> None:
        settings_file.http_url(base_url, what="auth proxy URL", with_path=True)
        self.base_url = base_url.rstrip("/")
        self._admin_key = admin_key_from(admin_key)
        self._credential = credential
        self._unix_socket = unix_socket
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"AdminClient({self.base_url!r})"

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.UnixConnector(self._unix_socket) if self._unix_socket else aiohttp.TCPConnector()
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, str]:
        headers = {"Authorization": "Bearer " + self._admin_key.reveal()}
        data = json.dumps(body).encode() if body is not None else None
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            async with self._http().request(method, self.base_url + path, headers=headers, data=data) as response:
                return response.status, await response.text(errors="replace")
        except TimeoutError:
            raise AuthProxyError(f"auth proxy at {self._origin()} did not answer {method} in time") from None
        except (aiohttp.ClientError, ValueError) as exc:
            # The origin only (no path, no token id, no credentials: refused in __init__) and the failure's class.
            raise AuthProxyError(f"auth proxy at {self._origin()} unreachable ({type(exc).__name__})") from None

    def _origin(self) -> str:
        """``scheme://host:port`` of the proxy: what a message may name (the path may carry a token id)."""
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.netloc}"

    @staticmethod
    def _admin_error(status: int, body: str) -> AuthProxyError:
        return AuthProxyError(
            f"auth proxy admin API answered {status}: {body[:200]}",
            status=status,
            retryable=status == 429 or status >= 500,
        )

    async def issue(
        self,
        run_id: str,
        step: str,
        expires_at: int,
        *,
        credential: Credential | tokens.SecretCredential | tokens.EgressCredential | None = None,
        limits: tokens.Limits | None = None,
        trace_context: str | None = None,
        egress: egress_policy.EgressPolicy | None = None,
    ) -> IssuedToken:
        """Issue a token bound to run, step and expiry for ``credential`` (default: §6.8's order;
        :class:`~ironflow.auth_proxy.tokens.EgressCredential`: an egress-only token, which needs
        ``egress``); ``trace_context``, the step's ``traceparent``, parents the proxy's spans of its
        requests; ``egress`` is what the step's egress proxy lets through (``None``: nothing)."""
        chosen = credential or self._credential or resolve_credential(None)
        body: dict[str, Any] = {
            "run_id": run_id,
            "step": step,
            "expires_at": int(expires_at),
            "credential": tokens.credential_to_wire(chosen),
        }
        if limits is not None and not limits.empty:
            body["limits"] = limits.to_json()
        if trace_context is not None:
            body["trace_context"] = trace_context
        if egress is not None:
            body["egress"] = egress.to_json()
        status, text = await self._call("POST", "/admin/v1/tokens", body)
        if status != 201:
            raise self._admin_error(status, text)
        try:
            answer = json.loads(text)
            return IssuedToken(str(answer["id"]), Secret(str(answer["token"])))
        except (ValueError, KeyError, TypeError):
            raise AuthProxyError("auth proxy admin API answered 201 with an unreadable body", status=201) from None

    async def revoke(self, token_id: str) -> bool:
        """Revoke one token; ``False`` when it was already gone (404 is fine)."""
        status, text = await self._call("DELETE", f"/admin/v1/tokens/{quote(token_id, safe='')}")
        if status == 204:
            return True
        if status == 404:
            return False
        raise self._admin_error(status, text)

    async def egress_notes(self, token_id: str) -> list[str]:
        """The egress decision lines the proxy kept for a live token, oldest first (a pod step's record)."""
        status, text = await self._call("GET", f"/admin/v1/tokens/{quote(token_id, safe='')}/egress")
        if status != 200:
            raise self._admin_error(status, text)
        try:
            lines = json.loads(text)["decisions"]
            return [str(line) for line in lines]
        except (ValueError, KeyError, TypeError):
            raise AuthProxyError("auth proxy admin API answered 200 with an unreadable body", status=200) from None

    async def set_egress(
        self, run_id: str, policy: egress_policy.EgressPolicy | None, *, step: str | None = None
    ) -> int:
        """Give the run's live tokens (of ``step`` only, when given) a new egress policy; how many changed.
        Their next connection through any replica is decided by it."""
        body: dict[str, Any] = {"egress": None if policy is None else policy.to_json()}
        if step is not None:
            body["step"] = step
        return await self._run_count("PUT", f"/admin/v1/runs/{quote(run_id, safe='')}/egress", "updated", body)

    async def revoke_run(self, run_id: str) -> int:
        """Revoke every token of a run; the number revoked."""
        return await self._run_count("DELETE", f"/admin/v1/runs/{quote(run_id, safe='')}/tokens", "revoked")

    async def _run_count(self, method: str, path: str, key: str, body: dict[str, Any] | None = None) -> int:
        """A run-wide call's count (``{key: n}`` in a 200)."""
        status, text = await self._call(method, path, body)
        if status != 200:
            raise self._admin_error(status, text)
        try:
            return int(json.loads(text)[key])
        except (ValueError, KeyError, TypeError):
            raise AuthProxyError("auth proxy admin API answered 200 with an unreadable body", status=200) from None
