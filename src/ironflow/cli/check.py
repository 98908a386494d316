"""``ironflow check``: run the seed's cluster checks against a live namespace and print a table.

Fetches the agent pods (or ``--pod``), asks the API server whether the worker could create
NetworkPolicies (a SubjectAccessReview), and with ``--auth-proxy`` sends the proxy an
unknown token, and runs the four exec probes (a short ``sh`` script per probe) in every
Running agent pod through ``pods/exec``; :mod:`ironflow.cluster.checks` decides.

Exit codes: 0 every check passed; 1 a check failed; 2 bad input (a namespace that does not
exist included); 3 nothing failed but a check could not run (skipped: no agent pod to inspect,
no rights for a review), or the cluster could not be reached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated, Any, Final

import aiohttp
import typer

from ironflow import errors, labels
from ironflow.cli import backends, exits, inputs, shared_options, tables
from ironflow.cli.formats import OutputFormat, document
from ironflow.cluster import checks, setup
from ironflow.kube import api as kube

__all__ = ["OutputFormat", "check", "exit_code", "register", "render_results", "run_checks"]

UNKNOWN_TOKEN: Final = checks.UNKNOWN_TOKEN
#: Execs open at once (each is a websocket through the API server to a kubelet).
_EXEC_CONCURRENCY: Final = 8


async def _pods(api: kube.KubeApi, namespace: str, pod: str | None) -> list[kube.KubeObject]:

    if pod is not None:
        return [await api.get(kube.PODS, namespace, pod)]
    listed = await api.list(kube.PODS, namespace, label_selector=labels.RUNNER_SELECTOR)
    return listed.items


async def _review(api: kube.KubeApi, body: dict[str, object]) -> tuple[kube.KubeObject | None, str]:

    reviews = kube.custom_resource(
        "authorization.k8s.io", "v1", "subjectaccessreviews", kind="SubjectAccessReview", namespaced=False
    )
    try:
        return await api.create(reviews, None, body), ""
    except errors.KubeNotFound:
        return None, "the API server does not serve SubjectAccessReview"
    except errors.KubeForbidden:
        return None, (
            "this account may not create SubjectAccessReviews: run as ironflow-check (check-rbac.yaml) "
            "or a cluster admin"
        )


async def _probe_proxy(url: str, timeout_s: float) -> tuple[int | None, str]:
    headers = {"Authorization": f"Bearer {UNKNOWN_TOKEN}", "anthropic-version": "2023-06-01"}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.get(f"{url.rstrip('/')}/v1/messages", headers=headers, allow_redirects=False) as resp,
        ):
            return resp.status, ""
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return None, type(exc).__name__


async def _exec_probe(
    api: kube.KubeApi, namespace: str, pod: Mapping[str, Any], command: tuple[str, ...], timeout_s: float
) -> checks.ProbeRun:
    name = str(pod["metadata"]["name"])
    containers = pod.get("spec", {}).get("containers") or [{}]
    try:
        async with asyncio.timeout(timeout_s):
            result = await api.exec(
                namespace,
                name,
                command,
                container=containers[0].get("name"),
                max_output_bytes=64 * 1024,
            )
    except TimeoutError:
        return checks.ProbeRun(name, error=f"no answer within {timeout_s:g}s")
    except errors.KubeForbidden:
        return checks.ProbeRun(
            name, error="this account may not exec (pods/exec get and create): run as ironflow-check"
        )
    except errors.KubeNotFound:
        return checks.ProbeRun(name, error="the pod is gone")
    except errors.KubernetesError as exc:
        return checks.ProbeRun(name, error=f"exec failed: {' '.join(exc.message.split())[:200]}")
    return checks.ProbeRun(name, result.exit_code, result.stdout.decode(errors="replace"))


async def _exec_probes(
    api: kube.KubeApi,
    namespace: str,
    pods: list[kube.KubeObject],
    probes: tuple[checks.ExecProbe, ...],
    *,
    timeout_s: float,
    egress_url: str,
) -> list[checks.CheckResult]:
    running = checks.running_pods(pods)
    room = asyncio.Semaphore(_EXEC_CONCURRENCY)

    async def one(pod: Mapping[str, Any], command: tuple[str, ...]) -> checks.ProbeRun:
        async with room:
            return await _exec_probe(api, namespace, pod, command, timeout_s)

    results = []
    for probe in probes:  # probes in table order; the pods of one probe a few at a time
        command = checks.probe_command(probe, egress_url=egress_url)
        runs = await asyncio.gather(*(one(pod, command) for pod in running))
        results.append(checks.decide_exec_probe(probe, runs))
    return results


async def run_checks(
    api: kube.KubeApi,
    *,
    namespace: str,
    pod: str | None = None,
    auth_proxy_url: str | None = None,
    worker_namespace: str = setup.WORKER_NAMESPACE,
    worker_service_account: str = setup.WORKER_SERVICE_ACCOUNT,
    proxy_timeout_s: float = 5.0,
    exec_probes: bool = True,
    exec_timeout_s: float = 20.0,
    egress_url: str = checks.EGRESS_PROBE_URL,
) -> list[checks.CheckResult]:
    """Fetch what the checks need and return every result, in table order.

    ``exec_probes=False`` reports the four exec rows as skipped (an account without
    ``pods/exec``); each exec is bounded by ``exec_timeout_s``; the egress probe must fail
    to reach ``egress_url``."""
    pods = await _pods(api, namespace, pod)
    results = checks.check_pods(pods, auth_proxy=auth_proxy_url is not None)
    body = checks.subject_access_review(
        namespace=namespace, service_account=worker_service_account, service_account_namespace=worker_namespace
    )
    review, why = await _review(api, body)
    results.append(checks.check_worker_cannot_create_networkpolicies(review, unavailable=why))
    if auth_proxy_url is not None:
        status, error = await _probe_proxy(auth_proxy_url, proxy_timeout_s)
        results.append(checks.check_proxy_refuses_unknown_token(status, error=error))
    proxied = auth_proxy_url is not None
    if not exec_probes:
        return results + checks.exec_probes_skipped("not run (--no-exec)", auth_proxy=proxied)
    probes = checks.exec_probes(auth_proxy=proxied)
    return results + await _exec_probes(api, namespace, pods, probes, timeout_s=exec_timeout_s, egress_url=egress_url)


def exit_code(results: list[checks.CheckResult]) -> int:
    """0 all passed, 1 any failed, 3 none failed but some were skipped (pure)."""
    if any(r.outcome is checks.Outcome.FAIL for r in results):
        return 1
    return 0 if checks.all_passed(results) else 3


def render_results(
    results: list[checks.CheckResult], namespace: str, fmt: OutputFormat, *, width: int | None = None
) -> str:
    """A table (check, result, why; boxed at a terminal's ``width``, plain for None), or a JSON or YAML list (pure)."""
    if fmt is not OutputFormat.TABLE:
        return document([{"check": r.check, "result": r.outcome.value, "why": r.why} for r in results], fmt)
    table = tables.new(title=f"ironflow check {namespace}", boxed=True)
    table.add_column("check")
    table.add_column("result")
    table.add_column("why")
    for r in results:
        table.add_row(r.check, r.outcome.value, r.why)
    return tables.render(table, width=width)


async def _check(
    cluster_config: kube.ClusterConfig,
    *,
    namespace: str,
    pod: str | None,
    auth_proxy_url: str | None,
    worker_namespace: str,
    worker_service_account: str,
    exec_probes: bool,
    egress_url: str,
) -> list[checks.CheckResult]:
    async with await backends.connect(cluster_config) as api:
        await backends.require_namespace(api, namespace)
        return await run_checks(
            api,
            namespace=namespace,
            pod=pod,
            auth_proxy_url=auth_proxy_url,
            worker_namespace=worker_namespace,
            worker_service_account=worker_service_account,
            exec_probes=exec_probes,
            egress_url=egress_url,
        )


def check(
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Agent namespace.")] = setup.AGENTS_NAMESPACE,
    pod: Annotated[str | None, typer.Option("--pod", help="Check this pod (default: every agent pod).")] = None,
    auth_proxy: Annotated[
        str | None, typer.Option("--auth-proxy", help="Proxy URL reachable from here: must answer 401 to a bad token.")
    ] = None,
    worker_namespace: Annotated[str, typer.Option("--worker-namespace")] = setup.WORKER_NAMESPACE,
    worker_service_account: Annotated[str, typer.Option("--worker-service-account")] = setup.WORKER_SERVICE_ACCOUNT,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")] = OutputFormat.TABLE,
    exec_probes: Annotated[
        bool, typer.Option("--exec/--no-exec", help="Run the exec probes in Running agent pods (pods/exec).")
    ] = True,
    egress_url: Annotated[
        str, typer.Option("--egress-url", help="A URL outside every profile: the egress probe must not reach it.")
    ] = checks.EGRESS_PROBE_URL,
    kubeconfig: shared_options.KubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Check a live sandbox: pod hardening, secrets, labels, RBAC, the auth proxy, exec probes."""
    inputs.dns_label(namespace)
    inputs.dns_label(worker_namespace, "worker namespace")
    if not egress_url.startswith(("http://", "https://")):
        exits.fail(f"--egress-url '{egress_url}' must start with http:// or https://")
    if auth_proxy is not None and not auth_proxy.startswith(("http://", "https://")):
        exits.fail(f"--auth-proxy '{auth_proxy}' must start with http:// or https://")
    target = backends.kube_cluster(kubeconfig, context)
    try:
        results = asyncio.run(
            _check(
                target,
                namespace=namespace,
                pod=pod,
                auth_proxy_url=auth_proxy,
                worker_namespace=worker_namespace,
                worker_service_account=worker_service_account,
                exec_probes=exec_probes,
                egress_url=egress_url,
            )
        )
    except errors.KubeNotFound:
        exits.fail(f"pod '{pod}' not found in namespace {namespace}")
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    typer.echo(render_results(results, namespace, output, width=tables.stdout_width()))
    raise typer.Exit(exit_code(results))


def register(app: typer.Typer) -> None:
    """Add ``ironflow check`` to the app."""
    app.command("check")(check)
