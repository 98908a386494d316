"""Worker side of the auth proxy: the admin client that issues and revokes tokens, and the
choice of which Claude credential a step's token stands for (§6.8).

The worker holds the credential and the admin key; the pod gets only the opaque token.
``AdminClient`` satisfies the launch sequence's ``TokenIssuer`` hook
(``issue(run_id, step, expires_at) -> (token_id, token)``, ``revoke``, ``revoke_run``).
Its errors are :class:`~ironflow.errors.AuthProxyError` and never hold the URL, the
admin key, the credential or the token; admin error bodies are cut to 200 characters.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, NamedTuple
from urllib.parse import quote, urlsplit

import aiohttp

from ironflow.auth_proxy import tokens
from ironflow.errors import AuthProxyError, ConfigError
from ironflow.secrets import Secret
from ironflow.steps import AccountSession

__all__ = [
    "ADMIN_KEY_ENV",
    "AdminClient",
    "Credential",
    "IssuedToken",
    "admin_key_from",
    "claude_pod_env",
    "resolve_credential",
    "secret_pod_env",
]

ADMIN_KEY_ENV: Final = "IRONFLOW_AUTH_PROXY_ADMIN_KEY"
_TIMEOUT_S: Final = 30.0
_NO_CREDENTIAL: Final = "no credential: attach a Provider Account or set CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_API_KEY"


@dataclass(frozen=True)
class Credential(tokens.ClaudeCredential):
    """A Claude credential on the worker side: its kind and its redacted value."""

    @classmethod
    def from_account(cls, session: AccountSession) -> Credential:
        """The account's kind as :attr:`AccountSession.credential_kind` tells it."""
        return cls("api_key" if session.credential_kind == "api_key" else "oauth_token", session.value)

    def to_json(self) -> dict[str, Any]:
        return tokens.credential_to_wire(self)


def resolve_credential(account: AccountSession | None, env: Mapping[str, str] | None = None) -> Credential:
    """The step's Provider Account, else ``CLAUDE_CODE_OAUTH_TOKEN``, else ``ANTHROPIC_API_KEY``.

    Raises:
        AuthProxyError: none of them is set (not retryable: the worker must be configured).
    """
    if account is not None:
        return Credential.from_account(account)
    source = os.environ if env is None else env
    oauth = source.get("CLAUDE_CODE_OAUTH_TOKEN", "")
    if oauth:
        return Credential("oauth_token", Secret(oauth))
    api_key = source.get("ANTHROPIC_API_KEY", "")
    if api_key:
        return Credential("api_key", Secret(api_key))
    raise AuthProxyError(_NO_CREDENTIAL, retryable=False)


def admin_key_from(value: Secret | str | None, env: Mapping[str, str] | None = None) -> Secret:
    """The builder's admin key, else ``IRONFLOW_AUTH_PROXY_ADMIN_KEY``; trimmed."""
    if value is not None:
        key = (value.reveal() if isinstance(value, Secret) else value).strip()
        if key:
            return Secret(key)
    source = os.environ if env is None else env
    key = source.get(ADMIN_KEY_ENV, "").strip()
    if not key:
        raise AuthProxyError(f"auth_proxy requires {ADMIN_KEY_ENV}", retryable=False)
    return Secret(key)


def claude_pod_env(proxy_url: str, token: Secret) -> dict[str, str]:
    """The only Claude-related env a proxied pod gets (§6.8): the proxy URL and the opaque token."""
    return {
        "ANTHROPIC_BASE_URL": proxy_url.rstrip("/"),
        "ANTHROPIC_AUTH_TOKEN": token.reveal(),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def secret_pod_env(env_name: str, proxy_url: str, token: Secret, secret: tokens.SecretCredential) -> dict[str, str]:
    """Env for a proxied secret (§6.9): ``<env>=<token>``, ``<env>_URL=<proxy>/r``, and for a Basic
    secret a git config that sends each exact host through the proxy with the token as password.

    >>> from ironflow.auth_proxy.tokens import Injection, SecretCredential
    >>> gl = SecretCredential("gitlab", Secret("glpat"), Injection("bearer"), ("gitlab.com",))
    >>> sorted(secret_pod_env("GITLAB_TOKEN", "http://proxy", Secret("ifap_1"), gl))
    ['GITLAB_TOKEN', 'GITLAB_TOKEN_URL']
    """
    base = proxy_url.rstrip("/")
    env = {env_name: token.reveal(), f"{env_name}_URL": f"{base}/r"}
    if secret.injection.kind != "basic":
        return env
    pair = f"{secret.injection.username or ''}:{token.reveal()}".encode()
    header = "Authorization: Basic " + base64.b64encode(pair).decode()
    index = 0
    for host in secret.hosts:
        if host.startswith("*."):
            continue  # git's insteadOf needs an exact host
        env[f"GIT_CONFIG_KEY_{index}"] = f"url.{base}/r/{host}/.insteadOf"
        env[f"GIT_CONFIG_VALUE_{index}"] = f"https://{host}/"
        env[f"GIT_CONFIG_KEY_{index + 1}"] = f"http.{base}/r/{host}/.extraHeader"
        env[f"GIT_CONFIG_VALUE_{index + 1}"] = header
        index += 2
    env["GIT_CONFIG_COUNT"] = str(index)
    return env


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
        parsed = urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.username or parsed.password:
            raise ConfigError("auth proxy URL must be http(s)://host[:port] without credentials in it")
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
            raise AuthProxyError(f"auth proxy admin call {method} timed out") from None
        except (aiohttp.ClientError, ValueError) as exc:
            # Stripped of the URL and the request: only the failure's class reaches the message.
            raise AuthProxyError(f"auth proxy unreachable ({type(exc).__name__})") from None

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
        credential: Credential | tokens.SecretCredential | None = None,
        limits: tokens.Limits | None = None,
    ) -> IssuedToken:
        """Issue a token bound to run, step and expiry for ``credential`` (default: §6.8's order)."""
        chosen = credential or self._credential or resolve_credential(None)
        body: dict[str, Any] = {
            "run_id": run_id,
            "step": step,
            "expires_at": int(expires_at),
            "credential": tokens.credential_to_wire(chosen),
        }
        if limits is not None and not limits.empty:
            body["limits"] = limits.to_json()
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

    async def revoke_run(self, run_id: str) -> int:
        """Revoke every token of a run; the number revoked."""
        status, text = await self._call("DELETE", f"/admin/v1/runs/{quote(run_id, safe='')}/tokens")
        if status != 200:
            raise self._admin_error(status, text)
        try:
            return int(json.loads(text)["revoked"])
        except (ValueError, KeyError, TypeError):
            raise AuthProxyError("auth proxy admin API answered 200 with an unreadable body", status=200) from None
