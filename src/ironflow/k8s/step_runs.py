"""Run one agent step in a single-use pod: check, clean the previous attempt, issue the
token, render, create, wait, read, delete, finalize (§1.4, §1.9).

The runner takes the provider's settings (never the provider), an API source and an
auth-proxy token issuer. Invariants:

* nothing is created before the step is checked (:func:`~ironflow.k8s.step_objects.check_step`);
* the step is rendered once, after its token is issued; run and step come from its scope;
* a step's persistent environment claim (§1.12) is created (or checked and its expiry
  refreshed) after the prompt ConfigMap and before the pod; it outlives the step, except
  when the API refused the pod: then a claim this step created is deleted;
* no auth-proxy token, no pod: with a token issuer, a refused issue fails the step first;
  a git workspace gets a second token, a grant for its git host only, for its clone; a policy
  that opens egress gets an egress-only token, the pod's proxy password (never the Claude token),
  whose decisions the proxy kept reach the step's log sink as ``ironflow`` lines when the step ends;
* once the prompt ConfigMap or the pod exists, it is deleted on every path, a
  cancellation included (the cleanup runs shielded, then the cancellation goes on);
* when the API cannot be reached to delete it, the pod is left with its
  ``ironflow.io/expires-at`` for the orphan reaper and the error says so;
* waiting uses the namespace's shared pod watch, never a watch or a poll per pod.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import os
import secrets as _random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ironflow import errors, labels, results, step_timeouts, steps, tracing, workspaces
from ironflow.auth_proxy import issuing, relays, revoking, tokens
from ironflow.auth_proxy.admin_client import AdminClient
from ironflow.claude import output, rate_limits
from ironflow.egress import variables
from ironflow.k8s import cleanup, environments, pod_wait, pods, reaper, step_manifests, step_objects
from ironflow.k8s.settings import ProviderSettings
from ironflow.k8s.workspaces import push as workspace_push
from ironflow.kube import api as kube
from ironflow.kube import connections
from ironflow.provider import LogSink
from ironflow.secrets import Secret
from ironflow.workspaces import Workspace, WorkspaceChanges, frames

__all__ = ["StepRunner"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepRunner:
    """The I/O of ``K8sEphemeralProvider``: ``run``, ``release_run``, reaping.

    Args:
        settings: the provider's settings (namespace, timeouts, rendering).
        api: connects (once) to the cluster; the same client serves every step.
        issuer: auth-proxy tokens; None when the provider has no auth proxy.
        owned: the admin client this runner made for itself, closed by :meth:`aclose`.
        worker_env: the worker's environment (names only, plus ``IRONFLOW_ALLOW_BYPASS``).
    """

    settings: ProviderSettings
    api: connections.ApiSource
    issuer: issuing.TokenIssuer | None = field(default=None, repr=False)
    owned: AdminClient | None = field(default=None, repr=False, compare=False)
    worker_env: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def of(
        cls,
        settings: ProviderSettings,
        *,
        api: kube.KubeApi | connections.ApiSource,
        issuer: issuing.TokenIssuer | None = None,
        worker_env: Mapping[str, str] | None = None,
        tokens: bool = True,
    ) -> StepRunner:
        """The runner of ``settings`` on ``api`` (a client the caller closes, or a source).

        With an auth proxy and no ``issuer``, an ``AdminClient`` is made (it needs the admin
        key: builder value or ``IRONFLOW_AUTH_PROXY_ADMIN_KEY``), closed by :meth:`aclose`;
        ``tokens=False`` skips it (reaping needs no token).
        """
        source = connections.constant(api) if isinstance(api, kube.KubeApi) else api
        owned: AdminClient | None = None
        if issuer is None and tokens and settings.auth_proxy_url is not None:
            issuer = owned = AdminClient(settings.auth_proxy_url, settings.auth_proxy_admin_key)
        env = dict(os.environ) if worker_env is None else dict(worker_env)
        return cls(settings, source, issuer, owned, env)

    async def aclose(self) -> None:
        """Close what the runner made for itself (the admin client); the API client is its owner's."""
        if self.owned is not None:
            await self.owned.close()

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    # -- the provider protocol --

    async def run(self, config: steps.AgentConfig, *, logs: LogSink | None = None) -> results.AgentResult:
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
            api, self.namespace, cleanup.run_selection(run_id), self.settings.previous_attempt_timeout_s
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

    async def _run(self, config: steps.AgentConfig, sink: LogSink | None) -> results.AgentResult:
        # 1. Check before anything exists (StepConfigError, PromptTooLarge...).
        step_objects.check_step(self.settings, config, worker_env=self.worker_env)
        started = time.monotonic()
        api = await self.api()
        async with pods.watching(api, self.namespace):
            await self._clear_previous_attempt(api, config.scope)
            return await self._attempt(api, config, sink, started)

    async def _clear_previous_attempt(self, api: kube.KubeApi, scope: steps.StepScope | None) -> None:
        """The previous attempt of this step must be gone first: two agents never overlap."""
        if scope is None:
            return
        written = scope.labels  # the selector matches label values as written on the pod
        deleted = await cleanup.delete_and_wait(
            api,
            self.namespace,
            cleanup.step_selection(written[labels.LABEL_RUN_ID], written[labels.LABEL_STEP]),
            self.settings.previous_attempt_timeout_s,
        )
        if deleted:
            _log.info(
                "deleted pods of a previous attempt before retrying: %d (step %s of run %s)",
                deleted,
                scope.step,
                scope.run_id,
            )

    async def _attempt(
        self, api: kube.KubeApi, config: steps.AgentConfig, sink: LogSink | None, started: float
    ) -> results.AgentResult:
        # 2. The expiry counts from now (after the cleanup); the token lives as long as the pod.
        now = int(time.time())
        pod_name = step_manifests.generate_pod_name(now * 1000, _random.randbits(32))
        token: Secret | None = None
        egress_token: Secret | None = None
        workspace_token: Secret | None = None
        relay_tokens: list[tuple[relays.RelaySpec, Secret]] = []
        secret = step_objects.workspace_secret(self.settings, config)
        # The step's bound, when shorter, is the pod's too: its deadline and expiry hold without the worker.
        settings = dataclasses.replace(self.settings, timeout_s=self._bound(config).seconds)
        # Every token issued here is revoked when the attempt ends, cancellation included.
        async with revoking.held(self.issuer) as held:
            if self.issuer is not None:
                run_id, step = (config.scope.run_id, config.scope.step) if config.scope else (pod_name, "agent")
                expires_at = now + step_manifests.lifetime_seconds(settings)
                _, token = await held.step_token(config, run_id, step, expires_at)
                if settings.egress is not None and variables.opens_anything(settings.egress):
                    # its own token: the proxy URL every tool in the pod sees cannot reach the model; its
                    # decisions reach the sink as the block ends (revoking.held)
                    _, egress_token = await held.egress_token(settings.egress, run_id, step, expires_at, notes=sink)
                if secret is not None:  # the clone's own grant: the git host only, never the Claude API
                    _, workspace_token = await held.secret_token(secret, run_id, step, expires_at)
                for spec in settings.relays:  # one grant per relay: its host and scope only
                    relay = spec.with_value(await _relay_value(api, self.namespace, spec))
                    _, relay_token = await held.secret_token(relay.secret(), run_id, step, expires_at)
                    relay_tokens.append((spec, relay_token))
            objects = step_objects.render_step(
                settings,
                config,
                now=now,
                pod_name=pod_name,
                token=token,
                worker_env=self.worker_env,
                environment_id=environments.generate_environment_name(now * 1000, _random.randbits(32)),
                workspace_token=workspace_token,
                relay_tokens=relay_tokens,
                egress_token=egress_token,
            )
            return await self._launch(api, objects, config, sink, started, now=now)

    async def _launch(
        self,
        api: kube.KubeApi,
        objects: step_objects.StepObjects,
        config: steps.AgentConfig,
        sink: LogSink | None,
        started: float,
        *,
        now: int,
    ) -> results.AgentResult:
        launch = _Launch(self, api, objects)
        outcome = pod_wait.PodOutcome()
        failure: BaseException | None = None
        where = {"backend": "k8s", "namespace": self.namespace, "pod": objects.pod_name}
        with tracing.span("ironflow.sandbox", parent=config.trace_context, **where) as span:
            try:
                await launch.create_prompt()
                await launch.prepare_environment(config, now)
                with tracing.span("ironflow.pod.create", pod=objects.pod_name):
                    await launch.create_pod()
                grace, limit = self.settings.image_pull_grace_s, self._bound(config).seconds
                if sink is None:
                    outcome = await pod_wait.wait(
                        api, self.namespace, objects.pod_name, limit, image_pull_grace_s=grace
                    )
                else:
                    outcome = await pod_wait.follow(
                        api, self.namespace, objects.pod_name, sink, limit, image_pull_grace_s=grace
                    )
                span.set(phase=outcome.phase, exit_code=outcome.exit_code, timed_out=outcome.timed_out)
            except BaseException as exc:
                failure = exc
                raise
            finally:
                await launch.clean_up(failure)
        try:
            result = environments.with_environment(self._finalize(config, outcome, started), objects.environment_id)
        except errors.IronflowError as exc:
            if not launch.pod_gone:
                exc.add_note(launch.left_message)  # e.g. a timeout whose pod the API would not delete
            raise
        spec = config.workspace
        if spec is None or spec.push_branch is None or result.workspace is None or outcome.phase != "Succeeded":
            return result
        return dataclasses.replace(result, workspace=await self._push(api, config, spec, result.workspace, now))

    async def _push(
        self, api: kube.KubeApi, config: steps.AgentConfig, spec: Workspace, changes: WorkspaceChanges, now: int
    ) -> WorkspaceChanges:
        """A succeeded step's changes, pushed to its workspace's new branch from a pod of their own."""
        secret = step_objects.workspace_secret(self.settings, config)
        if self.issuer is None or secret is None:
            raise errors.StepConfigError("a push needs the auth proxy's admin client to issue its grant")
        run_id, step = (config.scope.run_id, config.scope.step) if config.scope else ("push", "agent")
        message = workspaces.push_message(step, config.prompt)
        return await workspace_push.push(
            api, self.settings, spec, changes, issuer=self.issuer, secret=secret, run_id=run_id, step=step,
            now=int(time.time()), message=message, pod_labels=config.scope.labels if config.scope else {},
        )  # fmt: skip

    def _bound(self, config: steps.AgentConfig) -> step_timeouts.StepBound:
        """The step's timeout or the provider's, the smaller."""
        return step_timeouts.effective(config.timeout, self.settings.timeout_s)

    def _finalize(self, config: steps.AgentConfig, outcome: pod_wait.PodOutcome, started: float) -> results.AgentResult:
        """Rate limits first, then: timed out, succeeded (parse), or failed with the container's exit code.

        A git workspace's report ends the log (:mod:`ironflow.workspaces.frames`): it is taken
        off before the agent's output is parsed; a step that succeeded without a whole report
        fails, a failed step's own failure wins over a missing report.
        """
        logs, changes = outcome.logs, None
        if config.workspace is not None and not outcome.timed_out:
            try:
                logs, changes = frames.split_frame(outcome.logs)
            except errors.WorkspaceUnsafe:
                if outcome.phase == "Succeeded":
                    raise
        rate_limits.record_rate_limits(config, logs)
        if outcome.timed_out:
            raise self._bound(config).timed_out()
        wall_ms = int((time.monotonic() - started) * 1000)
        if outcome.phase == "Succeeded":
            result = output.parse_output(logs, config, wall_ms=wall_ms)
        else:
            # No recorded code (evicted, deadline exceeded, never ran): 1, as a failed process.
            code = outcome.exit_code if outcome.exit_code else 1
            result = output.handle_nonzero_exit(code, logs, "", config, wall_ms=wall_ms)
        return result if changes is None else dataclasses.replace(result, workspace=changes)


class _Launch:
    """The objects one launch created so far, and their deletion on every path."""

    def __init__(self, runner: StepRunner, api: kube.KubeApi, objects: step_objects.StepObjects) -> None:
        self.runner, self.api, self.objects = runner, api, objects
        self.ns = runner.namespace
        self.expires_at = str(objects.expires_at)
        self.claim_created = False
        self.pod_created = False
        self.pod_gone = True

    @property
    def left_message(self) -> str:
        return (
            f"pod '{self.objects.pod_name}' could not be deleted and is left for the orphan reaper "
            f"(expires at {self.expires_at})"
        )

    async def create_prompt(self) -> None:
        if self.objects.prompt_configmap is None:
            return
        try:
            await self.api.create(kube.CONFIGMAPS, self.ns, self.objects.prompt_configmap)
        except errors.KubernetesError as exc:
            raise pod_wait.with_prefix(exc, "failed to create prompt ConfigMap") from exc

    async def prepare_environment(self, config: steps.AgentConfig, now: int) -> None:
        """Create the new claim, or check and refresh the resumed one."""
        claim, environment_id = self.objects.environment_claim, self.objects.environment_id
        if claim is not None and environment_id is not None:
            try:
                await self.api.create(kube.PERSISTENTVOLUMECLAIMS, self.ns, claim)
            except BaseException as exc:
                self.claim_created = pods.may_exist_after(exc)
                if isinstance(exc, errors.KubernetesError):
                    raise pod_wait.with_prefix(exc, f"failed to create environment claim '{environment_id}'") from exc
                raise
            self.claim_created = True
        elif environment_id is not None and self.runner.settings.environment is not None:
            await self._resume_environment(self.runner.settings.environment, environment_id, now)

    async def create_pod(self) -> None:
        try:
            await self.api.create(kube.PODS, self.ns, self.objects.pod)
        except BaseException as exc:
            self.pod_created = pods.may_exist_after(exc)
            if isinstance(exc, errors.KubernetesError):
                raise pod_wait.with_prefix(exc, "failed to create K8s pod") from exc
            raise
        self.pod_created = True

    async def clean_up(self, failure: BaseException | None) -> None:
        """Delete the pod and the prompt (and a claim whose pod was refused); name what is left."""
        objects = self.objects
        if self.pod_created:
            self.pod_gone = await pods.delete_quietly(
                self.api, kube.PODS, self.ns, objects.pod_name, expires_at=self.expires_at
            )
        elif self.claim_created and objects.environment_id is not None:
            # The API refused the pod: the environment this step created holds nothing yet.
            await pods.delete_quietly(self.api, kube.PERSISTENTVOLUMECLAIMS, self.ns, objects.environment_id)
        if objects.prompt_configmap_name is not None:
            await pods.delete_quietly(
                self.api, kube.CONFIGMAPS, self.ns, objects.prompt_configmap_name, expires_at=self.expires_at
            )
        if not self.pod_gone and isinstance(failure, errors.KubernetesError):
            raise type(failure)(
                f"{failure.message}; {self.left_message}", status=failure.status, reason=failure.reason
            ) from failure
        if not self.pod_gone and failure is not None:
            failure.add_note(self.left_message)

    async def _resume_environment(self, volume: environments.EnvironmentVolume, environment_id: str, now: int) -> None:
        """The resumed claim must be ours and alive; its expiry restarts from now (§1.12).

        Raises:
            StepConfigError: ``environment '{id}' not found or expired`` (missing, being
                deleted, or not an ironflow environment claim).
        """
        gone = errors.StepConfigError(environments.not_found_message(environment_id))
        try:
            claim = await self.api.get(kube.PERSISTENTVOLUMECLAIMS, self.ns, environment_id)
        except errors.KubeNotFound:
            raise gone from None
        except errors.KubernetesError as exc:
            raise pod_wait.with_prefix(exc, f"failed to read environment claim '{environment_id}'") from exc
        if not environments.is_live_environment_claim(claim):
            raise gone
        expires_at = environments.environment_expires_at(volume, now=now, lifetime_s=self.objects.expires_at - now)
        try:
            await self.api.patch(
                kube.PERSISTENTVOLUMECLAIMS, self.ns, environment_id, environments.environment_expiry_patch(expires_at)
            )
        except errors.KubeNotFound:
            raise gone from None
        except errors.KubernetesError as exc:
            raise pod_wait.with_prefix(
                exc, f"failed to refresh the expiry of environment claim '{environment_id}'"
            ) from exc


async def _relay_value(api: kube.KubeApi, namespace: str, spec: relays.RelaySpec) -> Secret:
    """A relay's credential, read from its Secret as the step starts (never put in a manifest).

    Raises:
        StepConfigError: the Secret or its key is missing, or not text (named; the value never is).
    """
    ref = spec.credential_secret
    if ref is None:
        raise errors.StepConfigError(f"relay {spec.name!r} has no credential_secret")
    try:
        found = await api.get(kube.SECRETS, namespace, ref.secret)
    except errors.KubeNotFound:
        raise errors.StepConfigError(
            f"relay {spec.name!r}: Secret {namespace}/{ref.secret} not found; create it or fix credential_secret"
        ) from None
    encoded = (found.get("data") or {}).get(ref.key)
    if not isinstance(encoded, str):
        raise errors.StepConfigError(f"relay {spec.name!r}: Secret {namespace}/{ref.secret} has no key {ref.key!r}")
    try:
        value = base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise errors.StepConfigError(
            f"relay {spec.name!r}: Secret {namespace}/{ref.secret} key {ref.key!r} is not base64 UTF-8 text"
        ) from None
    if not tokens.is_header_safe(value):
        raise errors.StepConfigError(
            f"relay {spec.name!r}: Secret {namespace}/{ref.secret} key {ref.key!r} holds characters a request "
            "cannot carry (a trailing newline?)"
        )
    return Secret(value)
