"""A step's proxy token from issue to revoke, for every backend (§6.8, §6.9).

Which Claude credential a token stands for (the step's Provider Account, else
``CLAUDE_CODE_OAUTH_TOKEN``, else ``ANTHROPIC_API_KEY``), issuing it for a step, the env that
delivers a proxied secret into a sandbox, and revoking a step's or a run's tokens. The k8s,
agent-sandbox and local backends all go through here; the Claude variables themselves are
written once, by :func:`ironflow.claude.layout.proxy_env`. No HTTP here: the issuer is a
:class:`TokenIssuer` (the admin client, or a local proxy's registry).
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from ironflow import errors
from ironflow.auth_proxy import tokens
from ironflow.egress import policy as egress_policy
from ironflow.secrets import Secret
from ironflow.steps import AccountLease, AgentConfig

__all__ = [
    "Credential",
    "EgressNotes",
    "TokenIssuer",
    "egress_notes",
    "issue_egress_token",
    "issue_secret_token",
    "issue_step_token",
    "resolve_credential",
    "revoke_run_tokens",
    "revoke_step_token",
    "secret_pod_env",
]

_log = logging.getLogger(__name__)

_NO_CREDENTIAL: Final = "no credential: attach a Provider Account or set CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_API_KEY"


@dataclass(frozen=True)
class Credential(tokens.ClaudeCredential):
    """A Claude credential on the worker side: its kind and its redacted value."""

    @classmethod
    def from_account(cls, lease: AccountLease) -> Credential:
        """The account's kind as :attr:`AccountLease.credential_kind` tells it."""
        return cls("api_key" if lease.credential_kind == "api_key" else "oauth_token", lease.value)

    def to_json(self) -> dict[str, Any]:
        return tokens.credential_to_wire(self)


def resolve_credential(account: AccountLease | None, env: Mapping[str, str] | None = None) -> Credential:
    """The step's Provider Account, else ``CLAUDE_CODE_OAUTH_TOKEN``, else ``ANTHROPIC_API_KEY``.

    Raises:
        MissingCredential: none of them is set (the worker must be configured).
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
    raise errors.MissingCredential(_NO_CREDENTIAL)


class TokenIssuer(Protocol):
    """Issues and revokes auth-proxy tokens (the auth proxy's ``AdminClient`` satisfies it)."""

    async def issue(
        self,
        run_id: str,
        step: str,
        expires_at: int,
        *,
        credential: Any = None,
        trace_context: str | None = None,
        egress: egress_policy.EgressPolicy | None = None,
    ) -> tuple[str, Secret]:
        """A new token bound to the run, the step and the sandbox's expiry: ``(token_id, token)``.

        ``credential`` is the step's Provider Account credential, or None for the issuer's default;
        ``trace_context`` the step's W3C ``traceparent`` (the proxy's request spans are its children);
        ``egress`` what the step's egress proxy lets through (None: nothing).
        """
        ...

    async def revoke(self, token_id: str) -> object: ...

    async def revoke_run(self, run_id: str) -> int: ...


def _named(exc: errors.AuthProxyError) -> errors.AuthProxyError:
    """``exc`` with ``auth proxy`` at its start once (the admin client's messages say it already)."""
    message = exc.message if exc.message.startswith("auth proxy") else f"auth proxy: {exc.message}"
    return errors.AuthProxyError(message, status=exc.status, retryable=exc.retryable)


async def issue_step_token(
    issuer: TokenIssuer, config: AgentConfig, run_id: str, step: str, expires_at: int
) -> tuple[str, Secret]:
    """Issue a step's Claude token with its Provider Account credential; never an egress policy
    (the pod's ``HTTPS_PROXY`` gets an egress-only token, :func:`issue_egress_token`).

    Raises:
        AuthProxyError: ``auth proxy: ...``, as retryable as the issuer's refusal was.
    """
    credential = None if config.account is None else Credential.from_account(config.account)
    try:
        return await issuer.issue(run_id, step, expires_at, credential=credential, trace_context=config.trace_context)
    except errors.AuthProxyError as exc:
        raise _named(exc) from exc


async def issue_secret_token(
    issuer: TokenIssuer, secret: tokens.SecretCredential, run_id: str, step: str, expires_at: int
) -> tuple[str, Secret]:
    """Issue a token that reaches ``secret``'s hosts only, under ``/r/`` (§6.9): a git
    workspace's clone holds it, the step's own token stays a Claude one.

    Raises:
        AuthProxyError: ``auth proxy: ...``, as retryable as the issuer's refusal was.
    """
    try:
        return await issuer.issue(run_id, step, expires_at, credential=secret)
    except errors.AuthProxyError as exc:
        raise _named(exc) from exc


async def issue_egress_token(
    issuer: TokenIssuer, policy: egress_policy.EgressPolicy, run_id: str, step: str, expires_at: int
) -> tuple[str, Secret]:
    """Issue a step's egress-only token (no credential behind it: the relays refuse it), carrying
    ``policy``: the password of the pod's ``HTTPS_PROXY``, so the proxy URL every tool in the pod
    sees reaches the egress proxy and nothing else.

    Raises:
        AuthProxyError: ``auth proxy: ...``, as retryable as the issuer's refusal was.
    """
    try:
        return await issuer.issue(run_id, step, expires_at, credential=tokens.EgressCredential(), egress=policy)
    except errors.AuthProxyError as exc:
        raise _named(exc) from exc


@runtime_checkable
class EgressNotes(Protocol):
    """An issuer that can also read a token's kept egress decisions (the admin client can)."""

    async def egress_notes(self, token_id: str) -> list[str]: ...


async def egress_notes(issuer: TokenIssuer, token_id: str) -> list[str]:
    """A token's egress decision lines for its step's record, read before it is revoked; none when
    the issuer cannot tell, and a failure is logged (short id only), never raised: the step's own
    outcome stands."""
    if not isinstance(issuer, EgressNotes):
        return []
    try:
        return await issuer.egress_notes(token_id)
    except errors.IronflowError as exc:
        _log.warning("could not read the egress decisions of proxy token %s: %s", token_id[:12], exc)
        return []


async def revoke_step_token(issuer: TokenIssuer, token_id: str) -> None:
    """Revoke a finished step's proxy token; a failure is logged (short id only), never raised."""
    try:
        await issuer.revoke(token_id)
    except errors.IronflowError as exc:
        _log.warning("could not revoke proxy token %s (it expires on its own): %s", token_id[:12], exc)


async def revoke_run_tokens(issuer: TokenIssuer | None, run_id: str) -> None:
    """Revoke a released run's proxy tokens; a failure is logged, never raised: the run's
    objects are already gone and its tokens expire on their own."""
    if issuer is None:
        return
    try:
        await issuer.revoke_run(run_id)
    except errors.IronflowError as exc:
        _log.warning("could not revoke the proxy tokens of run %s (they expire on their own): %s", run_id, exc)


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
