"""Run one agent step in a single-use pod: render, clean the previous attempt, create, wait,
read, delete, finalize (§1.4, §1.9).

The runner is the I/O half of ``K8sEphemeralProvider``; the provider's pure
``manifests()`` decides what to create. Invariants:

* nothing is created before the step is validated and rendered;
* a step's persistent environment claim (§1.12) is created (or checked and its expiry
  refreshed) after the prompt ConfigMap and before the pod; it outlives the step, except
  when the API refused the pod: then a claim this step created is deleted;
* no auth-proxy token, no pod: with a token issuer, a refused issue fails the step first;
* once the prompt ConfigMap or the pod exists, it is deleted on every path, a
  cancellation included (the cleanup runs shielded, then the cancellation goes on);
* when the API cannot be reached to delete it, the pod is left with its
  ``ironflow.io/expires-at`` for the orphan reaper and the error says so;
* waiting uses the namespace's shared pod watch, never a watch or a poll per pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from ironflow import errors, labels, steps
from ironflow.auth_proxy import issuing
from ironflow.claude import output, rate_limits
from ironflow.k8s import cleanup, environments, pods, reaper
from ironflow.kube import api as kube
from ironflow.kube import pod_status
from ironflow.provider import LogSink
from ironflow.secrets import Secret

if TYPE_CHECKING:
    from ironflow.k8s.provider import K8sEphemeralProvider

__all__ = [
    "LOG_CAP_BYTES",
    "ApiSource",
    "Renderer",
    "StepRunner",
    "close_shared_apis",
    "shared_api",
]

_log = logging.getLogger(__name__)

#: Lines beyond this many bytes are still streamed to the sink but not kept for parsing.
LOG_CAP_BYTES: Final = 50 * 1024 * 1024
#: After the pod ended, the log stream may still hold lines: wait this long for each.
_DRAIN_LINE_S: Final = 2.0


class Renderer(Protocol):
    """The provider's pure rendering: the objects of a step, in creation order."""

    def __call__(
        self,
        config: steps.AgentConfig,
        *,
        now: int,
        proxy_token: str | None,
        pod_name: str | None,
        environment_id: str | None = None,
    ) -> list[dict[str, Any]]: ...


ApiSource = Callable[[], Awaitable[kube.KubeApi]]

_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[object, kube.KubeApi]] = weakref.WeakKeyDictionary()


def shared_api(cluster: object | None) -> ApiSource:
    """Connect once per (event loop, cluster) and hand the same client to every step.

    One client means one connection pool and, through the informer registry, one pod
    watch per namespace for the whole process.
    """
    key = cluster if cluster is not None else kube.DefaultCluster()

    async def connect() -> kube.KubeApi:
        clients = _shared.setdefault(asyncio.get_running_loop(), {})
        client = clients.get(key)
        if client is None:
            fresh = await kube.KubeApi.connect(key)  # type: ignore[arg-type]
            client = clients.setdefault(key, fresh)
            if client is not fresh:  # another step connected meanwhile
                await fresh.close()
        return client

    return connect


async def close_shared_apis() -> None:
    """Close the shared clients of the running event loop (at worker shutdown)."""
    clients = _shared.pop(asyncio.get_running_loop(), {})
    for client in clients.values():
        await client.close()


def _constant(client: kube.KubeApi) -> ApiSource:
    async def source() -> kube.KubeApi:
        return client

    return source


@dataclass(frozen=True)
class _Plan:
    """The rendered objects of one launch and what the runner needs to know about them."""

    configmap: dict[str, Any] | None
    pod: dict[str, Any]
    #: A new environment claim to create (None: no environment, or a resumed one).
    claim: dict[str, Any] | None = None

    @property
    def pod_name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def pod_labels(self) -> Mapping[str, str]:
        result: Mapping[str, str] = self.pod["metadata"].get("labels") or {}
        return result

    @property
    def expires_at(self) -> str | None:
        result: str | None = (self.pod["metadata"].get("annotations") or {}).get(labels.ANNOTATION_EXPIRES_AT)
        return result


def _plan(objects: Sequence[dict[str, Any]]) -> _Plan:
    pods = [o for o in objects if o.get("kind") == "Pod"]
    cms = [o for o in objects if o.get("kind") == "ConfigMap"]
    claims = [o for o in objects if o.get("kind") == "PersistentVolumeClaim"]
    if len(pods) != 1 or len(cms) > 1 or len(claims) > 1:
        raise errors.ConfigError(
            "the provider rendered an unexpected set of objects: "
            "need one Pod, at most one ConfigMap and one PersistentVolumeClaim"
        )
    return _Plan(cms[0] if cms else None, pods[0], claims[0] if claims else None)


def _with_prefix(exc: errors.KubernetesError, prefix: str) -> errors.KubernetesError:
    """The same error class, its message prefixed with what the runner was doing."""
    return type(exc)(f"{prefix}: {exc.message}", status=exc.status, reason=exc.reason)


@dataclass
class _Outcome:
    phase: str = "Unknown"
    timed_out: bool = False
    logs: str = ""


@dataclass(frozen=True)
class StepRunner:
    """The I/O of ``K8sEphemeralProvider``: ``invoke``, ``invoke_with_logs``, ``release_run``, reaping.

    Args:
        api: connects (once) to the cluster; the same client serves every step.
        render: the provider's ``manifests`` (validation included; pure).
        namespace: where the pods go.
        timeout_s: the step's wait limit once the pod is created.
        previous_attempt_timeout_s: how long a cleanup waits for pods to be gone.
        issuer: auth-proxy tokens; None when the provider has no auth proxy.
    """

    api: ApiSource
    render: Renderer
    namespace: str
    timeout_s: float
    previous_attempt_timeout_s: float = 60.0
    issuer: issuing.TokenIssuer | None = field(default=None, repr=False)
    #: Closed by :meth:`aclose`: the admin client this runner made for itself.
    owned: Any = field(default=None, repr=False, compare=False)
    #: The provider's persistent environment volume (its ttl sets a resumed claim's expiry).
    environment: environments.EnvironmentVolume | None = None

    @classmethod
    def for_provider(
        cls,
        provider: K8sEphemeralProvider,
        *,
        api: kube.KubeApi | ApiSource | None = None,
        issuer: issuing.TokenIssuer | None = None,
        worker_env: Mapping[str, str] | None = None,
        tokens: bool = True,
    ) -> StepRunner:
        """The runner of ``provider``: its rendering, namespace, timeouts and auth proxy.

        ``api`` defaults to one shared client per cluster and event loop; with an auth
        proxy and no ``issuer``, an ``AdminClient`` is made (it needs the admin key:
        builder value or ``IRONFLOW_AUTH_PROXY_ADMIN_KEY``), closed by :meth:`aclose`;
        ``tokens=False`` skips it (reaping needs no token).
        """
        s = provider.settings
        if api is None:
            source = shared_api(s.cluster)
        elif isinstance(api, kube.KubeApi):
            source = _constant(api)
        else:
            source = api
        owned: Any = None
        if issuer is None and tokens and s.auth_proxy_url is not None:
            from ironflow.auth_proxy.client import AdminClient

            issuer = owned = AdminClient(s.auth_proxy_url, s.auth_proxy_admin_key)
        env = dict(os.environ) if worker_env is None else dict(worker_env)

        def render(
            config: steps.AgentConfig,
            *,
            now: int,
            proxy_token: str | None,
            pod_name: str | None,
            environment_id: str | None = None,
        ) -> list[dict[str, Any]]:
            return provider.manifests(
                config,
                now=now,
                proxy_token=proxy_token,
                worker_env=env,
                pod_name=pod_name,
                environment_id=environment_id,
            )

        return cls(
            source,
            render,
            s.namespace,
            s.timeout_s,
            s.previous_attempt_timeout_s,
            issuer,
            owned,
            s.environment,
        )

    @classmethod
    @contextlib.asynccontextmanager
    async def using(cls, provider: K8sEphemeralProvider) -> AsyncIterator[StepRunner]:
        """The provider's runner for one call, closed after it (what the provider's methods use)."""
        runner = cls.for_provider(provider)
        try:
            yield runner
        finally:
            await runner.aclose()

    async def aclose(self) -> None:
        """Close what the runner made for itself (the admin client); the API client stays shared."""
        if self.owned is not None:
            await self.owned.close()

    # -- the provider protocol --

    async def run(self, config: steps.AgentConfig, *, logs: LogSink | None = None) -> steps.AgentResult:
        """Run the step to completion and leave nothing behind; with ``logs``, ``--verbose``
        stream-json and each line goes to the sink as it arrives."""
        if logs is None:
            return await self._run(config, None)
        return await self._run(config.replace(verbose=True), logs)

    async def release_run(self, run_id: str) -> int:
        """Delete every object of the run (and of runs whose root it is), wait for the pods to go.

        Then revoke the run's proxy tokens (a failure is only logged: they expire on their own).
        Raises :class:`~ironflow.errors.CleanupError` (replayable) naming the run.
        """
        api = await self._connect(f"run {run_id}")
        deleted = await cleanup.delete_and_wait(
            api, self.namespace, cleanup.run_selection(run_id), self.previous_attempt_timeout_s
        )
        await issuing.revoke_run_tokens(self.issuer, run_id)
        return deleted

    async def reap_orphans(self, *, dry_run: bool = False) -> reaper.ReapReport:
        """One reaping pass over the provider's namespace."""
        return await reaper.reap_namespace(await self.api(), self.namespace, dry_run=dry_run)

    def spawn_orphan_reaper(self, interval_s: float) -> reaper.OrphanReaper:
        """A background reaping loop on this namespace (first pass at once); stop it with ``await h.stop()``."""
        return reaper.spawn_orphan_reaper(self.api, self.namespace, interval_s)

    # -- one launch --

    async def _connect(self, what: str) -> kube.KubeApi:
        try:
            return await self.api()
        except errors.KubernetesError as exc:
            if isinstance(exc, errors.KubeClientConfigError):
                raise
            raise errors.CleanupError(f"cannot reach the Kubernetes API for {what}: {exc}") from exc

    async def _run(self, config: steps.AgentConfig, sink: LogSink | None) -> steps.AgentResult:
        # 1. Validate and render before anything exists (StepConfigError, PromptTooLarge...).
        draft_now = int(time.time())
        draft = _plan(self.render(config, now=draft_now, proxy_token=None, pod_name=None))
        started = time.monotonic()
        api = await self.api()
        async with pods.watching(api, self.namespace):
            return await self._attempt(api, config, sink, draft, draft_now, started)

    async def _attempt(
        self,
        api: kube.KubeApi,
        config: steps.AgentConfig,
        sink: LogSink | None,
        draft: _Plan,
        draft_now: int,
        started: float,
    ) -> steps.AgentResult:

        # 2. The previous attempt of this step must be gone first: two agents never overlap.
        run_id = draft.pod_labels.get(labels.LABEL_RUN_ID)
        step = draft.pod_labels.get(labels.LABEL_STEP)
        if run_id and step:
            deleted = await cleanup.delete_and_wait(
                api, self.namespace, cleanup.step_selection(run_id, step), self.previous_attempt_timeout_s
            )
            if deleted:
                _log.info(
                    "deleted pods of a previous attempt before retrying: %d (step %s of run %s)", deleted, step, run_id
                )

        # 3. The expiry counts from now (after the cleanup); the token lives as long as the pod.
        now = int(time.time())
        token_id: str | None = None
        token: Secret | None = None
        if self.issuer is not None:
            lifetime = int(draft.expires_at or draft_now) - draft_now
            token_id, token = await issuing.issue_step_token(
                self.issuer, config, run_id or draft.pod_name, step or "agent", now + lifetime
            )
        try:
            plan = _plan(
                self.render(
                    config,
                    now=now,
                    proxy_token=token.reveal() if token is not None else None,
                    pod_name=draft.pod_name,
                    environment_id=draft.claim["metadata"]["name"] if draft.claim is not None else None,
                )
            )
            result = await self._launch(api, plan, config, sink, started, now=now)
        finally:
            if token_id is not None and self.issuer is not None:
                await pods.shielded(issuing.revoke_step_token(self.issuer, token_id))
        return result

    async def _launch(
        self,
        api: kube.KubeApi,
        plan: _Plan,
        config: steps.AgentConfig,
        sink: LogSink | None,
        started: float,
        *,
        now: int,
    ) -> steps.AgentResult:
        ns = self.namespace
        cm_name = plan.configmap["metadata"]["name"] if plan.configmap is not None else None
        environment_id: str | None = None
        claim_created = False
        pod_created = False
        outcome = _Outcome()
        failure: BaseException | None = None
        try:
            if plan.configmap is not None:
                try:
                    await api.create(kube.CONFIGMAPS, ns, plan.configmap)
                except errors.KubernetesError as exc:
                    raise _with_prefix(exc, "failed to create prompt ConfigMap") from exc
            if plan.claim is not None:
                environment_id = str(plan.claim["metadata"]["name"])
                try:
                    await api.create(kube.PERSISTENTVOLUMECLAIMS, ns, plan.claim)
                except BaseException as exc:
                    claim_created = pods.may_exist_after(exc)
                    if isinstance(exc, errors.KubernetesError):
                        raise _with_prefix(exc, f"failed to create environment claim '{environment_id}'") from exc
                    raise
                claim_created = True
            elif config.resume_environment_id is not None and self.environment is not None:
                environment_id = config.resume_environment_id
                await self._resume_environment(api, plan, self.environment, environment_id, now)
            try:
                await api.create(kube.PODS, ns, plan.pod)
            except BaseException as exc:
                pod_created = pods.may_exist_after(exc)
                if isinstance(exc, errors.KubernetesError):
                    raise _with_prefix(exc, "failed to create K8s pod") from exc
                raise
            pod_created = True
            if sink is None:
                outcome = await self._wait(api, plan.pod_name)
            else:
                outcome = await self._stream(api, plan.pod_name, sink)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            pod_gone = True
            if pod_created:
                pod_gone = await pods.delete_quietly(api, kube.PODS, ns, plan.pod_name, expires_at=plan.expires_at)
            elif claim_created and environment_id is not None:
                # The API refused the pod: the environment this step created holds nothing yet.
                await pods.delete_quietly(api, kube.PERSISTENTVOLUMECLAIMS, ns, environment_id)
            if cm_name is not None:
                await pods.delete_quietly(api, kube.CONFIGMAPS, ns, cm_name, expires_at=plan.expires_at)
            left = (
                f"pod '{plan.pod_name}' could not be deleted and is left for the orphan reaper "
                f"(expires at {plan.expires_at})"
            )
            if not pod_gone and isinstance(failure, errors.KubernetesError):
                raise type(failure)(
                    f"{failure.message}; {left}", status=failure.status, reason=failure.reason
                ) from failure
            if not pod_gone and failure is not None:
                failure.add_note(left)
        try:
            return environments.with_environment(self._finalize(config, outcome, started), environment_id)
        except errors.IronflowError as exc:
            if not pod_gone:
                exc.add_note(left)  # e.g. a timeout whose pod the API would not delete
            raise

    async def _resume_environment(
        self,
        api: kube.KubeApi,
        plan: _Plan,
        volume: environments.EnvironmentVolume,
        environment_id: str,
        now: int,
    ) -> None:
        """The resumed claim must be ours and alive; its expiry restarts from now (§1.12).

        Raises:
            StepConfigError: ``environment '{id}' not found or expired`` (missing, being
                deleted, or not an ironflow environment claim).
        """
        gone = errors.StepConfigError(environments.not_found_message(environment_id))
        ns = self.namespace
        try:
            claim = await api.get(kube.PERSISTENTVOLUMECLAIMS, ns, environment_id)
        except errors.KubeNotFound:
            raise gone from None
        except errors.KubernetesError as exc:
            raise _with_prefix(exc, f"failed to read environment claim '{environment_id}'") from exc
        if not environments.is_live_environment_claim(claim):
            raise gone
        lifetime = int(plan.expires_at or now) - now
        expires_at = environments.environment_expires_at(volume, now=now, lifetime_s=lifetime)
        try:
            await api.patch(
                kube.PERSISTENTVOLUMECLAIMS, ns, environment_id, environments.environment_expiry_patch(expires_at)
            )
        except errors.KubeNotFound:
            raise gone from None
        except errors.KubernetesError as exc:
            raise _with_prefix(exc, f"failed to refresh the expiry of environment claim '{environment_id}'") from exc

    async def _wait(self, api: kube.KubeApi, pod_name: str) -> _Outcome:
        """Wait for Succeeded/Failed on the shared watch (bounded by the timeout), then read the log."""
        try:
            pod = await pods.wait_for_pod(api, self.namespace, pod_name, pod_status.pod_finished, self.timeout_s)
        except errors.KubernetesError as exc:
            raise _with_prefix(exc, "failed waiting for pod completion") from exc
        if pod is None:
            return _Outcome(phase="TimedOut", timed_out=True)
        logs = await pods.read_log_quietly(api, self.namespace, pod_name)
        return _Outcome(phase=pod_status.phase(pod), logs=logs)

    async def _stream(self, api: kube.KubeApi, pod_name: str, sink: LogSink) -> _Outcome:
        """Follow the log to ``sink`` while the pod runs; the result is parsed from the kept lines."""
        ns = self.namespace
        try:
            pod = await pods.wait_for_pod(api, ns, pod_name, pod_status.pod_started, self.timeout_s)
        except errors.KubernetesError as exc:
            raise _with_prefix(exc, "failed waiting for pod to start") from exc
        if pod is None:
            return _Outcome(phase="TimedOut", timed_out=True)

        if pod_status.pod_finished(pod):
            logs = await pods.read_log_quietly(api, ns, pod_name)
            for line in logs.splitlines():
                sink.log("stdout", line)
            return _Outcome(phase=pod_status.phase(pod), logs=logs)

        kept: list[str] = []
        kept_bytes = 0
        count = 0

        async def pump() -> None:
            nonlocal kept_bytes, count
            async for line in api.follow_log(ns, pod_name):
                sink.log("stdout", line)
                count += 1
                if kept_bytes + len(line) + 1 <= LOG_CAP_BYTES:
                    kept.append(line)
                    kept_bytes += len(line) + 1

        pump_task = asyncio.ensure_future(pump())
        end_task = asyncio.ensure_future(pods.wait_for_pod(api, ns, pod_name, pod_status.pod_finished, None))
        try:
            done, _ = await asyncio.wait({pump_task, end_task}, timeout=self.timeout_s, return_when="FIRST_COMPLETED")
            if not done:
                return _Outcome(phase="TimedOut", timed_out=True, logs="\n".join(kept))
            if pump_task.done() and pump_task.exception() is not None and not end_task.done():
                # The stream could not be opened or broke: wait for the end, then read in one go.
                _log.warning(
                    "log stream of pod %s failed (%s); reading the log at the end", pod_name, pump_task.exception()
                )
                try:
                    pod = await asyncio.wait_for(end_task, timeout=self.timeout_s)
                except TimeoutError:
                    return _Outcome(phase="TimedOut", timed_out=True)
                logs = await pods.read_log_quietly(api, ns, pod_name)
                for line in logs.splitlines()[count:]:
                    sink.log("stdout", line)
                return _Outcome(phase=pod_status.phase(pod), logs=logs)
            if not end_task.done():
                # The stream ended (the container exited): the phase follows within moments.
                try:
                    pod = await asyncio.wait_for(end_task, timeout=self.timeout_s)
                except TimeoutError:
                    return _Outcome(phase="TimedOut", timed_out=True, logs="\n".join(kept))
            else:
                pod = end_task.result()
                # The pod ended: drain what is left, as long as lines keep coming.
                while not pump_task.done():
                    before = count
                    await asyncio.wait({pump_task}, timeout=_DRAIN_LINE_S)
                    if count == before:
                        break
            return _Outcome(phase=pod_status.phase(pod), logs="\n".join(kept))
        except errors.KubernetesError as exc:
            raise _with_prefix(exc, "failed waiting for pod completion") from exc
        finally:
            for task in (pump_task, end_task):
                task.cancel()
            await asyncio.gather(pump_task, end_task, return_exceptions=True)

    def _finalize(self, config: steps.AgentConfig, outcome: _Outcome, started: float) -> steps.AgentResult:
        """Rate limits first, then: timed out, succeeded (parse), or anything else (exit code 1)."""
        rate_limits.record_rate_limits(config, outcome.logs)
        if outcome.timed_out:
            raise errors.AgentTimeout(self.timeout_s)
        wall_ms = int((time.monotonic() - started) * 1000)
        if outcome.phase == "Succeeded":
            return output.parse_output(outcome.logs, config, wall_ms=wall_ms)
        return output.handle_nonzero_exit(1, outcome.logs, "", config, wall_ms=wall_ms)
