"""A step's proxy tokens, revoked the moment the step's block ends, on any path (reference 5.0.1).

Every backend that issues a step's tokens through a :class:`~ironflow.auth_proxy.issuing.TokenIssuer`
(k8s pods, agent-sandbox claims) holds them in :func:`held`: when the block ends (success,
failure, a timeout, the step's task cancelled) each token is revoked at once, not at its expiry.
Two cancellation holes are closed here, once for all: a cancel that lands while an issue is in
flight (the proxy may have made the token already: its answer is awaited and the token revoked),
and a second cancel while the revokes run (they finish, then the cancel goes on). A revoke that
fails is logged by :func:`~ironflow.auth_proxy.issuing.revoke_step_token` with the short id only;
the token then expires on its own. An egress-only token held with a sink hands the decisions
the proxy kept for it to that sink first (``ironflow`` lines, the step's record), as both
backends' steps end. Never logs or raises a token's value.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Final

from ironflow import errors
from ironflow.auth_proxy import issuing, tokens
from ironflow.egress import policy as egress_policy
from ironflow.provider import LogSink
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig

__all__ = ["EGRESS_NOTES_WAIT_S", "ISSUE_ANSWER_WAIT_S", "HeldTokens", "held"]

_log = logging.getLogger(__name__)

#: How long a dropped step waits for an issue still in flight, to revoke what it made: a cancel
#: must end the step, and an issue that never answers made nothing the step could have used.
ISSUE_ANSWER_WAIT_S: Final = 30.0
#: How long a finished step waits for its egress decisions: a hung proxy must not hold its end.
EGRESS_NOTES_WAIT_S: Final = 5.0

_Issued = tuple[str, Secret]


class HeldTokens:
    """The tokens issued for one block; :func:`held` revokes every one when the block ends."""

    def __init__(self, issuer: issuing.TokenIssuer | None) -> None:
        self._issuer = issuer
        self._issues: list[asyncio.Future[_Issued]] = []
        self._notes: list[tuple[str, LogSink]] = []

    async def step_token(self, config: AgentConfig, run_id: str, step: str, expires_at: int) -> _Issued:
        """The step's Claude token (:func:`~ironflow.auth_proxy.issuing.issue_step_token`)."""
        return await self._hold(issuing.issue_step_token(self._required(), config, run_id, step, expires_at))

    async def egress_token(
        self,
        policy: egress_policy.EgressPolicy,
        run_id: str,
        step: str,
        expires_at: int,
        *,
        notes: LogSink | None = None,
    ) -> _Issued:
        """The step's egress-only token (:func:`~ironflow.auth_proxy.issuing.issue_egress_token`); with
        ``notes``, the decisions the proxy kept for it reach that sink when the block ends, before the revoke."""
        issued = await self._hold(issuing.issue_egress_token(self._required(), policy, run_id, step, expires_at))
        if notes is not None:
            self._notes.append((issued[0], notes))
        return issued

    async def secret_token(self, secret: tokens.SecretCredential, run_id: str, step: str, expires_at: int) -> _Issued:
        """A grant for ``secret``'s hosts only (:func:`~ironflow.auth_proxy.issuing.issue_secret_token`)."""
        return await self._hold(issuing.issue_secret_token(self._required(), secret, run_id, step, expires_at))

    def _required(self) -> issuing.TokenIssuer:
        if self._issuer is None:
            raise errors.ConfigError("issuing a proxy token needs the auth proxy's admin client (auth_proxy_admin_key)")
        return self._issuer

    async def _hold(self, issue: Coroutine[Any, Any, _Issued]) -> _Issued:
        task = asyncio.ensure_future(issue)
        self._issues.append(task)  # kept before the await: a cancel mid-issue still revokes what it made
        return await asyncio.shield(task)

    async def _hand_notes(self) -> None:
        """Each noted token's egress decisions, as every proxy replica kept them, into its sink as
        ``ironflow`` lines (a local step's arrive as they are made); not while the step is being cancelled."""
        task = asyncio.current_task()
        if self._issuer is None or (task is not None and task.cancelling()):
            return
        for token_id, sink in self._notes:
            try:
                async with asyncio.timeout(EGRESS_NOTES_WAIT_S):
                    lines = await issuing.egress_notes(self._issuer, token_id)
            except TimeoutError:
                _log.warning(
                    "the egress decisions of proxy token %s did not come within %gs", token_id[:12], EGRESS_NOTES_WAIT_S
                )
                continue
            for line in lines:
                sink.log("ironflow", line)

    async def _revoke_all(self) -> None:
        for task in self._issues:
            await asyncio.wait({task}, timeout=ISSUE_ANSWER_WAIT_S)  # in flight: its answer names what to revoke
            if not task.done():
                task.cancel()
                _log.warning("a proxy token's issue did not answer in time; the token, if made, expires on its own")
                continue
            if task.cancelled() or task.exception() is not None or self._issuer is None:
                continue  # never issued: nothing to revoke
            await issuing.revoke_step_token(self._issuer, task.result()[0])


@contextlib.asynccontextmanager
async def held(issuer: issuing.TokenIssuer | None) -> AsyncIterator[HeldTokens]:
    """Tokens issued in the block, each revoked as soon as it ends, cancellation included (an
    egress token's decisions handed to its sink first)."""
    holder = HeldTokens(issuer)
    try:
        yield holder
    finally:
        try:
            await holder._hand_notes()
        finally:  # a cancel while the notes are read still revokes every token
            await _to_the_end(holder._revoke_all())


async def _to_the_end(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end even if cancelled meanwhile (again and again), then pass the cancel on."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True  # the revokes first, then the cancel goes on
    task.result()
    if cancelled:
        raise asyncio.CancelledError
