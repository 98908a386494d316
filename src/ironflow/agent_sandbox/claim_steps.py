"""The I/O half of the agent-sandbox backend: one step per claim, on the settings it is given.

Claim, wait for Ready on the shared claim watch, issue the token (and the egress-only token of a
pod whose policy opens anything, whose decisions the proxy kept reach the step's log sink as
``ironflow`` lines when the agent is done, as a pod step's do), exec the deliveries and the
agent (a git workspace's clone before it), parse, push a git workspace's change when asked
(after the step's token is revoked, before the claim goes), and on every path revoke the token
and delete the claim (shielded from cancellation). Also ``release_run``, the claim reaper and ``wait_for``. Invariants:

* nothing is created before the step is validated (pod checks, prompt size, arguments);
* the token is issued only once the claim is Ready, and reaches the sandbox only over exec
  stdin: never an object, an argv, a log line or an error;
* once the claim exists, it is deleted on every path (its Sandbox and pod follow by cascade).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets as _random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ironflow import errors, labels, results, step_timeouts, steps, tracing
from ironflow._renamed import renamed_names
from ironflow.agent_sandbox import claim_environments, claim_workspaces, claims, deliveries, sandbox_environments
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.auth_proxy import issuing, revoking
from ironflow.auth_proxy.admin_client import AdminClient
from ironflow.claude import output, rate_limits
from ironflow.egress import variables
from ironflow.k8s import environments, pod_wait, pods, reaper
from ironflow.k8s import step_manifests as pod_manifests
from ironflow.kube import api as kube
from ironflow.kube import connections, informer, pod_problems, pod_status, reading
from ironflow.provider import LogSink
from ironflow.secrets import Secret
from ironflow.workspaces import frames

__all__ = ["ClaimStepRunner", "claims_watch"]

#: How long a claim failed on its pod waits for the pod's own verdict (which says more).
_POD_VERDICT_WAIT_S: Final = 2.0


class ClaimStepRunner:
    """Steps of one settings value over one API client, each in a claimed sandbox; ``async with``
    closes an admin client it made. (``SandboxStepRunner``, the old name, warns: every backend
    runs its steps in a sandbox, this one through a SandboxClaim.)

    Without an ``issuer``, :meth:`for_settings` makes an admin client when the pod has an auth
    proxy. The API client comes from ``api``: a client, or a source of the provider's own
    connections (the provider's ``aclose`` closes those).
    """

    def __init__(
        self,
        settings: sandbox_steps.AgentSandboxSettings,
        *,
        api: kube.KubeApi | connections.ApiSource,
        issuer: issuing.TokenIssuer | None,
        worker_env: Mapping[str, str] | None,
        owned: AdminClient | None = None,
    ) -> None:
        self.settings = settings
        self.resources = claims.resources(settings.api_version)
        self._api = connections.constant(api) if isinstance(api, kube.KubeApi) else api
        self.issuer = issuer
        self.worker_env = dict(os.environ) if worker_env is None else dict(worker_env)
        self._owned = owned

    @classmethod
    def for_settings(cls, settings: sandbox_steps.AgentSandboxSettings, api: connections.ApiSource) -> ClaimStepRunner:
        """The runner a provider call uses: the provider's API client, an admin client when proxied."""
        owned = None
        if settings.auth_proxy_url is not None:
            owned = AdminClient(settings.auth_proxy_url, settings.auth_proxy_admin_key)
        return cls(settings, api=api, issuer=owned, worker_env=None, owned=owned)

    async def __aenter__(self) -> ClaimStepRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the admin client this runner made (the API client is the provider's to close)."""
        if self._owned is not None:
            await self._owned.close()

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    async def api(self) -> kube.KubeApi:
        return await self._api()

    # -- the provider protocol --

    async def run(self, config: steps.AgentConfig, *, logs: LogSink | None = None) -> results.AgentResult:
        """One step in a claimed sandbox; with ``logs``, ``--verbose`` stream-json and each line
        reaches the sink as the exec streams it."""
        if logs is None:
            return await self._run(config, None)
        return await self._run(config.replace(verbose=True), logs)

    async def release_run(self, run_id: str) -> int:
        """Delete the run's claims (and its child runs'), wait until gone, revoke the run's tokens."""
        api = await self.api()
        deleted = await claims.delete_claims_and_wait(
            api,
            self.resources.claims,
            self.namespace,
            claims.run_claim_selectors(run_id),
            f"run {run_id}",
            self.settings.previous_attempt_timeout_s,
        )
        await issuing.revoke_run_tokens(self.issuer, run_id)
        return deleted

    async def reap_orphans(self, *, dry_run: bool = False) -> claims.ClaimReapReport:
        """One pass deleting expired claims of this namespace."""
        return await claims.reap_claims(await self.api(), self.resources.claims, self.namespace, dry_run=dry_run)

    def spawn_orphan_reaper(self, interval_s: float) -> reaper.OrphanReaper:
        """A background loop deleting expired claims (first pass at once); stop it with ``await h.stop()``."""
        return claims.spawn_claim_reaper(self.api, self.resources.claims, self.namespace, interval_s)

    async def wait_for(
        self, claim: str, condition: str = "Finished", *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """``kubectl wait --for=condition=<condition> sandboxclaim/<claim>``."""
        return await claims.wait_for(
            await self.api(), self.resources.claims, self.namespace, claim, condition, timeout_s=timeout_s
        )

    async def deliver_token(self, sandbox: str, *, run_id: str | None = None, step: str = "agent") -> str:
        """Issue a proxy token for a Sandbox whose pod runs the agent itself (the ephemeral and
        standalone-pvc patterns) and write it in over exec stdin once the pod runs; returns the
        token's id (revoke it with the issuer; it expires with the pod's lifetime otherwise).

        The token is issued only once the pod runs, and reaches it only as exec stdin.

        Raises:
            ConfigError: no auth proxy (nothing to deliver) or no issuer.
            OperationTimeout: the pod did not run within the ready timeout.
            SandboxFailed, SandboxRefused: the cluster says the pod will not run.
            KubernetesError: the pod ended before the token reached it, or the write failed.
        """
        s = self.settings
        if s.auth_proxy_url is None or self.issuer is None:
            raise errors.ConfigError("deliver_token needs a pod provider with auth_proxy(url) (and its admin key)")
        api = await self.api()
        timeout = s.ready_timeout_s
        async with pods.watching(api, self.namespace):
            pod = await self._pod_name(api, sandbox)
            grace = pod_problems.PullGrace(s.pod.settings.image_pull_grace_s)
            found = await pod_wait.wait_for(api, self.namespace, pod, pod_status.pod_started, timeout, grace)
        if found is None:
            raise errors.OperationTimeout(
                f"the pod of Sandbox '{sandbox}' did not run within {timeout:g}s: no token was issued"
            )
        if pod_status.phase(found) != "Running":
            raise errors.KubernetesError(
                f"the pod of Sandbox '{sandbox}' is {pod_status.phase(found)}: its agent no longer waits for a token",
                status=409,
            )
        config = steps.AgentConfig(prompt=f"sandbox {sandbox}")  # the issuer reads account and trace only
        token_id, token = await issuing.issue_step_token(
            self.issuer, config, run_id or sandbox, step, s.expires_at(int(time.time()))
        )
        raw = token.reveal().encode()
        argv = deliveries.write_file_command(deliveries.PROXY_TOKEN_FILE, len(raw))
        try:
            result = await api.exec(self.namespace, pod, argv, container=pod_manifests.CONTAINER_NAME, stdin=raw)
        except BaseException:
            await pods.shielded(issuing.revoke_step_token(self.issuer, token_id))
            raise
        if result.exit_code != 0:
            await pods.shielded(issuing.revoke_step_token(self.issuer, token_id))
            raise errors.KubernetesError(
                f"could not write the proxy token into pod '{pod}': exit {result.exit_code}", status=500
            )
        return token_id

    # -- one step --

    async def _run(self, config: steps.AgentConfig, sink: LogSink | None) -> results.AgentResult:
        s = self.settings
        sandbox_steps.check_step(s, config, worker_env=self.worker_env)  # refuses the step before anything exists
        started = time.monotonic()
        api = await self.api()
        res = self.resources
        # Held for the step: the claim's Ready, and the pod of the sandbox it is bound to (fail fast).
        async with claims_watch(api, self.namespace, res.claims), pods.watching(api, self.namespace):
            scope = config.scope
            if scope is not None:
                await claims.delete_claims_and_wait(
                    api,
                    res.claims,
                    self.namespace,
                    (claims.step_claim_selector(scope),),
                    f"the previous attempt of step {scope.step} of run {scope.run_id}",
                    s.previous_attempt_timeout_s,
                )
            now = int(time.time())
            environment = await claim_environments.prepare(api, s, config, now=now)  # the claim's name, if any
            name = environment or pod_manifests.generate_pod_name(
                now * 1000, _random.randbits(32), prefix=claims.CLAIM_NAME_PREFIX
            )
            claim = sandbox_steps.claim_manifest(s, config, name=name, now=now, environment=environment is not None)
            where = {"backend": "agent-sandbox", "namespace": self.namespace, "claim": name}
            with tracing.span("ironflow.sandbox", parent=config.trace_context, **where):
                created = False
                try:
                    try:
                        with tracing.span("ironflow.claim.create", claim=name):
                            await api.create(res.claims, self.namespace, claim)
                    except errors.KubeConflict as exc:
                        if environment is None:
                            raise
                        raise errors.KubeConflict(sandbox_environments.in_use_message(environment), status=409) from exc
                    except BaseException as exc:
                        created = pods.may_exist_after(exc)  # then it is deleted below
                        unserved = _unserved(exc, res.claims)
                        if unserved is None:
                            raise
                        raise unserved from exc
                    created = True
                    with tracing.span("ironflow.claim.ready", claim=name) as span:
                        ready = await self._wait_ready(api, name)
                        span.set(sandbox=claims.bound_sandbox(ready))
                    result = await self._in_sandbox(api, config, claim, ready, sink, started)
                    return environments.with_environment(result, environment)
                finally:
                    if created:
                        await claims.delete_quietly(api, res.claims, self.namespace, name)

    async def _wait_ready(self, api: kube.KubeApi, name: str) -> dict[str, Any]:
        """The claim once Ready; at once the cluster's reason when the claim, or the pod of the
        sandbox it is bound to, will not get there (a bad image, a missing Secret, no node)."""
        timeout = self.settings.ready_timeout_s
        claim_wait = asyncio.ensure_future(
            claims.wait_ready(api, self.resources.claims, self.namespace, name, timeout_s=timeout)
        )
        pod_watch = asyncio.ensure_future(self._watch_sandbox_pod(api, name, timeout))
        try:
            await asyncio.wait((claim_wait, pod_watch), return_when=asyncio.FIRST_COMPLETED)
            if self._claim_failed_on_its_pod(api, name, claim_wait) and not pod_watch.done():
                # The controller saw the same pod end; its verdict names the pod, the reason and
                # the events, the claim's only the controller's summary: wait briefly for it.
                await asyncio.wait((pod_watch,), timeout=_POD_VERDICT_WAIT_S)
            if pod_watch.done() and pod_watch.exception() is not None:
                pod_watch.result()  # the pod's verdict; a pod that runs leaves the answer to the claim
            ready = await claim_wait
        finally:
            for task in (claim_wait, pod_watch):
                task.cancel()
            await asyncio.gather(claim_wait, pod_watch, return_exceptions=True)
        if ready is None:
            last = informer.informer_for(api, self.namespace, self.resources.claims).get(name) or {}
            cond = claims.condition(last, "Ready") or {}
            why = f" (Ready={cond.get('status', 'unknown')}, reason {cond.get('reason', 'none')})" if cond else ""
            raise errors.OperationTimeout(
                f"SandboxClaim '{name}' did not become Ready within {timeout:g}s{why}; it was deleted. "
                "Check the warm pool and the agent-sandbox controller"
            )
        return ready

    def _claim_failed_on_its_pod(self, api: kube.KubeApi, name: str, claim_wait: asyncio.Future[Any]) -> bool:
        """Whether the claim's wait ended in the cluster's failure while bound to a sandbox."""
        if not claim_wait.done() or claim_wait.cancelled():
            return False
        if not isinstance(claim_wait.exception(), errors.SandboxFailed | errors.SandboxRefused):
            return False
        last = informer.informer_for(api, self.namespace, self.resources.claims).get(name) or {}
        return bool(claims.bound_sandbox(last))

    async def _watch_sandbox_pod(self, api: kube.KubeApi, claim: str, timeout_s: float) -> None:
        """Once the claim is bound to a sandbox, classify its pod as a pod step's is classified
        (:func:`ironflow.k8s.pod_wait.wait_for`): raises the verdict's error; returns once the pod
        runs, or when the claim never binds (the claim's own wait decides then)."""
        shared = informer.informer_for(api, self.namespace, self.resources.claims)
        bound = await shared.wait_for(claim, lambda c: bool(claims.bound_sandbox(c)), timeout_s)
        sandbox = claims.bound_sandbox(bound) if bound is not None else None
        if sandbox is None:
            return
        pod = await self._pod_name(api, sandbox)
        grace = pod_problems.PullGrace(self.settings.pod.settings.image_pull_grace_s)
        await pod_wait.wait_for(api, self.namespace, pod, pod_status.pod_started, timeout_s, grace)

    async def _pod_name(self, api: kube.KubeApi, sandbox: str) -> str:
        return await claims.sandbox_pod(api, self.resources, self.namespace, sandbox)

    async def _in_sandbox(
        self,
        api: kube.KubeApi,
        config: steps.AgentConfig,
        claim: Mapping[str, Any],
        ready: Mapping[str, Any],
        sink: LogSink | None,
        started: float,
    ) -> results.AgentResult:
        sandbox = claims.bound_sandbox(ready)
        if not sandbox:
            raise errors.KubernetesError(
                f"SandboxClaim '{claim['metadata']['name']}' is Ready without status.sandbox.name"
            )
        pod = await self._pod_name(api, str(sandbox))
        token: Secret | None = None
        issuer = self.issuer
        # Where the step's token and its workspace's grants are counted, and until when they hold.
        scope = config.scope
        run_id = scope.run_id if scope is not None else str(claim["metadata"]["name"])
        step = scope.step if scope is not None else "agent"
        expires_at = int(claim["metadata"]["annotations"][labels.ANNOTATION_EXPIRES_AT])
        # The step's token is revoked when the block ends, cancellation included.
        egress_token: Secret | None = None
        policy = self.settings.pod.settings.egress
        async with revoking.held(issuer) as held:
            if issuer is not None:
                _, token = await held.step_token(config, run_id, step, expires_at)
                if policy is not None and variables.opens_anything(policy):  # the proxy variables' password
                    _, egress_token = await held.egress_token(policy, run_id, step, expires_at, notes=sink)
            commit = None
            if config.workspace is not None:
                commit = await claim_workspaces.clone(
                    api, self.settings, issuer, config, pod=pod, run_id=run_id, step=step, expires_at=expires_at
                )
            plan = sandbox_steps.exec_plan(
                self.settings,
                config,
                proxy_token=token,
                egress_token=egress_token,
                worker_env=self.worker_env,
                workspace_commit=commit,
            )
            container = pod_manifests.CONTAINER_NAME
            for argv, stdin in plan.deliveries:
                result = await api.exec(self.namespace, pod, argv, container=container, stdin=stdin)
                if result.exit_code != 0:
                    raise errors.KubernetesError(
                        f"could not write a file into sandbox pod '{pod}': exit {result.exit_code}", status=500
                    )
            bound = step_timeouts.effective(config.timeout, self.settings.step_timeout_s)
            lines = _LineSplitter(sink) if sink is not None else None
            try:
                with tracing.span("ironflow.sandbox.exec", pod=pod) as span:
                    async with asyncio.timeout(bound.seconds):
                        result = await api.exec(
                            self.namespace,
                            pod,
                            plan.agent,
                            container=container,
                            on_output=lines.feed if lines is not None else None,
                        )
                    span.set(exit_code=result.exit_code)
            except TimeoutError:
                raise bound.timed_out() from None
            finally:
                if lines is not None:
                    lines.flush()
        stdout = result.stdout.decode(errors="replace")
        stderr = result.stderr.decode(errors="replace")
        changes = None
        if config.workspace is not None:  # the report is the exec's last stdout line, as a pod's log's
            try:
                stdout, changes = frames.split_frame(stdout)
            except errors.WorkspaceUnsafe:
                if result.exit_code == 0:
                    raise
        rate_limits.record_rate_limits(config, stdout)
        wall_ms = int((time.monotonic() - started) * 1000)
        if result.exit_code == 0:
            parsed = output.parse_output(stdout, config, wall_ms=wall_ms)
        else:
            parsed = output.handle_nonzero_exit(result.exit_code, stdout, stderr, config, wall_ms=wall_ms)
        parsed = environments.with_environment(parsed, self.settings.environment)
        if changes is None:
            return parsed
        if result.exit_code == 0:  # the claim is still held: the push runs in the step's pod, after it
            with tracing.span("ironflow.sandbox.push", pod=pod):
                changes = await claim_workspaces.push(
                    api, self.settings, issuer, config, changes, pod=pod, run_id=run_id, step=step,
                    expires_at=expires_at,
                )  # fmt: skip
        return dataclasses.replace(parsed, workspace=changes)


class _LineSplitter:
    """Hands output to a sink line by line as the exec streams it (stream 1 stdout, 2 stderr); a
    line past a pod log's bound is cut there, as a followed log's is: the agent writes what it likes."""

    def __init__(self, sink: LogSink) -> None:
        self.sink = sink
        self.cutters = {stream: reading.LineCutter(reading.MAX_LOG_LINE_BYTES) for stream in _STREAMS}

    def feed(self, stream: int, chunk: bytes) -> None:
        for line in self.cutters[stream].feed(chunk):
            self.sink.log(_STREAMS[stream], line.decode(errors="replace"))

    def flush(self) -> None:
        for stream, cutter in self.cutters.items():
            for line in cutter.end():
                self.sink.log(_STREAMS[stream], line.decode(errors="replace"))


_STREAMS = {1: "stdout", 2: "stderr"}


def claims_watch(api: kube.KubeApi, namespace: str, resource: kube.Resource) -> Any:
    """Hold the namespace's shared claim watch for the block (one list, then events)."""
    return informer.informer_for(api, namespace, resource).hold()


def _unserved(exc: BaseException, resource: kube.Resource) -> errors.KubeNotFound | None:
    """For a 404 that is not a missing namespace, the error naming the claim API the cluster does
    not serve (agent-sandbox or its extensions are not installed); None for any other failure."""
    if not isinstance(exc, errors.KubeNotFound) or (exc.reason == "NotFound" and "namespaces" in exc.message):
        return None
    return errors.KubeNotFound(
        f"{exc.message}; the API does not serve {resource.plural}.{resource.group}/{resource.version}: install "
        "agent-sandbox with its extensions (or choose the API version it serves with api_version)",
        status=404,
        reason=exc.reason,
    )


# The old names (ironflow._renamed), for one release: a type checker reads an alias, a run warns.
if TYPE_CHECKING:
    SandboxStepRunner = ClaimStepRunner
else:
    __getattr__ = renamed_names(__name__)
