"""Pause, resume and idle suspend of agent-sandbox sessions: their Sandbox's ``operatingMode`` (I/O).

Pausing sets the session's Sandbox ``operatingMode: Suspended`` and waits until the controller
says ``Suspended``: its pod is deleted, so every process of the session ends, and the Sandbox,
its claim and its PVCs stay. Resuming sets ``Running`` and waits until the new pod is Ready and
the session's runtime answers. What survives is what is on a PVC: with the provider's
``home_volume`` the session's HOME (its working directory, a git workspace's clone and base) is
its Sandbox's own PVC, so its files come back; /tmp and its processes never do. Without it a
pause would lose the files, so it is refused in one line, as is ``idle_suspend``.

A held session opened with ``idle_suspend`` is watched (:mod:`~ironflow.k8s.sessions.suspends`):
with no request for that long and none under way it is paused; the next request (a handle's, or
one a server forwards, both through :meth:`ClaimPauses.active`) resumes it first. A session this
process does not hold is paused and resumed by id all the same (``ironflow sandbox pause --provider``). The session's
TTL still ends it, paused or not (its claim's ``shutdownTime``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Final

from ironflow import errors
from ironflow.agent_sandbox import claims, lifecycle, models
from ironflow.agent_sandbox.step_render import AgentSandboxSettings
from ironflow.k8s.sessions import suspends
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.sessions.values import SessionInfo, SessionNotFound, check_session_id

__all__ = ["ClaimPauses", "pause_refusal"]

_RES: Final = claims.resources(models.ApiVersion.V1BETA1)


def pause_refusal(settings: AgentSandboxSettings) -> str | None:
    """Why this provider's sessions cannot be paused, or None (pure)."""
    if settings.api_version is not models.ApiVersion.V1BETA1:
        return "pausing agent-sandbox sessions needs agent-sandbox 1.0 (api_version v1beta1)"
    if settings.home_volume is None:
        return (
            "a paused agent-sandbox session's pod is deleted, and its files with it unless its HOME is a PVC: set "
            "home_volume on the provider (e.g. '1Gi') and run 'ironflow sandbox apply-template'"
        )
    return None


class ClaimPauses:
    """The pauses of one provider's sessions; the sessions themselves are ``host``'s, their requests
    and idle watchers :class:`~ironflow.k8s.sessions.suspends.Suspends`'."""

    def __init__(self, settings: AgentSandboxSettings, host: K8sSessions) -> None:
        self.settings = settings
        self.host = host
        self.requests = suspends.Suspends(lambda: {info.id for info in host.held()}, self._suspend, self._resume)

    def check(self) -> None:
        """Raises: ConfigError: see :func:`pause_refusal`."""
        refusal = pause_refusal(self.settings)
        if refusal is not None:
            raise errors.ConfigError(refusal)

    def track(self, session_id: str, idle_suspend: float | None) -> None:
        """Follow a held session's requests; with ``idle_suspend``, pause it once idle that long."""
        self.requests.track(session_id, idle_suspend)

    async def forget(self, session_id: str) -> None:
        """Stop following a session (it is closed or let go)."""
        await self.requests.forget(session_id)

    async def aclose(self) -> None:
        await self.requests.aclose()

    def active(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """A request under way: a paused session resumed first, kept from idle suspend until the block ends."""
        return self.requests.active(session_id)

    async def pause(self, session_id: str) -> SessionInfo:
        """Suspend the session's Sandbox and wait until its pod is gone.

        Raises:
            ConfigError: see :func:`pause_refusal`. SessionNotFound: no such session.
            OperationTimeout: the controller did not suspend it within the provider's ready timeout.
        """
        return await self.requests.pause(session_id)

    async def _suspend(self, session_id: str) -> SessionInfo:
        """:meth:`pause`, under the session's lock."""
        self.check()
        info = await self._info(session_id)
        self.requests.mark(session_id, paused=True)  # from now: a request waits for the lock, then resumes
        self.host.mark(session_id, paused=True)
        try:
            await self._set_mode(session_id, models.OperatingMode.SUSPENDED)
        except BaseException:
            await self._undo(session_id)
            raise
        return dataclasses.replace(info, paused=True)

    async def _undo(self, session_id: str) -> None:
        """A suspend that failed: the session is set running again, as it was."""
        with contextlib.suppress(errors.IronflowError):
            await asyncio.shield(self._set_mode(session_id, models.OperatingMode.RUNNING))
        self.requests.mark(session_id, paused=False)
        self.host.mark(session_id, paused=False)

    async def resume(self, session_id: str) -> SessionInfo:
        """Run the session's Sandbox again on its kept PVCs; back once its pod is Ready and the runtime
        answers (a held session's link is made anew). Resuming a running session is no error.

        Raises:
            ConfigError: see :func:`pause_refusal`. SessionNotFound: no such session.
            OperationTimeout: not Ready within the provider's ready timeout.
        """
        return await self.requests.resume(session_id)

    async def _resume(self, session_id: str) -> SessionInfo:
        """:meth:`resume`, under the session's lock."""
        self.check()
        info = await self._info(session_id)
        await self._set_mode(session_id, models.OperatingMode.RUNNING)
        if info.paused:  # held here, its pod gone: reach the new one
            await self.host.relink(session_id)
            self.host.mark(session_id, paused=False)
        self.requests.mark(session_id, paused=False)
        return dataclasses.replace(info, paused=False)

    async def suspended(self, session_id: str) -> bool:
        """Whether the session's Sandbox is set to Suspended (False: no such session, or it runs)."""
        api = await self.host.client()
        try:
            target = await lifecycle.resolve(api, self.host.namespace, session_id)
            sandbox = await api.get(_RES.sandboxes, self.host.namespace, target.sandbox)
        except errors.KubeNotFound:
            return False
        return (sandbox.get("spec") or {}).get("operatingMode") == str(models.OperatingMode.SUSPENDED)

    async def _info(self, session_id: str) -> SessionInfo:
        check_session_id(session_id)
        for info in self.host.held():
            if info.id == session_id:
                return info
        for info in await self.host.find():
            if info.id == session_id:
                return info
        raise SessionNotFound(f"no open sandbox session '{session_id}' in {self.host.namespace}")

    async def _set_mode(self, session_id: str, mode: models.OperatingMode) -> None:
        api = await self.host.client()
        timeout = self.settings.ready_timeout_s
        try:
            await lifecycle.set_mode(api, self.host.namespace, session_id, mode, timeout_s=timeout)
            if mode is models.OperatingMode.RUNNING:  # the claim says Ready a moment after its Sandbox
                await claims.wait_for(api, _RES.claims, self.host.namespace, session_id, "Ready", timeout_s=timeout)
        except errors.KubeNotFound as exc:
            raise SessionNotFound(f"sandbox session '{session_id}' has no sandbox: {exc.message}") from None
