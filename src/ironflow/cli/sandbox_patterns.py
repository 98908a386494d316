"""``ironflow sandbox render|apply-template|reap``: the seed's agent-sandbox patterns, the provider's template, claims.

``ironflow sandbox render PATTERN`` prints the objects of a pattern (YAML documents or a JSON
list) without touching a cluster; ``ironflow sandbox apply-template`` creates or updates the
SandboxTemplate and SandboxWarmPool an :class:`~ironflow.agent_sandbox.AgentSandboxProvider`
with the given pod settings uses; ``ironflow sandbox reap`` deletes expired step
claims. Results go to stdout, warnings and progress to stderr; bad
input exits 2 with one line naming the problem, an API failure 3 (:mod:`ironflow.cli.exits`).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Annotated, Final

import typer
from rich.console import Console

from ironflow import errors, settings_file
from ironflow.agent_sandbox import apply, autoscale, catalog, claims, demand, models, patterns
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.cli import backends, exits, inputs, shared_options
from ironflow.cli.formats import ManifestFormat, emit_objects
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import clusters

__all__ = ["apply_template", "parse_egress", "parse_egress_except", "reap", "register", "render"]

_EGRESS: Final = re.compile(r"(?P<cidr>[0-9a-fA-F:.]+/\d{1,3})(?::(?P<port>\d{1,5}))?")


def parse_egress(text: str) -> tuple[str, int | None]:
    """``CIDR`` or ``CIDR:PORT`` (IPv4 ``10.0.0.1/32:5432``; an IPv6 CIDR takes no port) (pure).

    >>> parse_egress("10.10.10.100/32:5432"), parse_egress("0.0.0.0/0")
    (('10.10.10.100/32', 5432), ('0.0.0.0/0', None))
    """
    match = _EGRESS.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"invalid --egress '{text}': use CIDR or CIDR:PORT, e.g. 10.10.10.100/32:5432")
    port = int(match["port"]) if match["port"] else None
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"invalid --egress '{text}': port must be 1-65535")
    return match["cidr"], port


def parse_egress_except(text: str) -> str:
    """A ``--egress-except`` CIDR, as given (pure).

    >>> parse_egress_except("10.0.0.0/8")
    '10.0.0.0/8'
    """
    match = _EGRESS.fullmatch(text.strip())
    if match is None or match["port"]:
        raise ValueError(f"invalid --egress-except '{text}': use a CIDR, e.g. 203.0.113.0/24")
    return match["cidr"]


def _load(path: Path | None, image: str) -> AgentSandboxProvider:
    """The provider of a settings file (agent-sandbox settings or pod settings alone), else of ``--image``."""

    if path is None:
        return AgentSandboxProvider(K8sEphemeralProvider.sandboxed(image))
    return AgentSandboxProvider.from_file(path, pod_settings_alone=True)


def render(
    pattern: Annotated[str, typer.Argument(help=f"One of: {', '.join(catalog.PATTERNS)}.")],
    name: Annotated[str, typer.Option("--name", help="Name of the sandbox/template/pool.")] = "claude-agent",
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Default: the provider file's, else 'default'.")
    ] = None,
    image: Annotated[str, typer.Option("--image", help="Runner image (without --provider).")] = patterns.DEFAULT_IMAGE,
    provider_file: Annotated[
        Path | None, typer.Option("--provider", help="Pod settings (the ephemeral provider's YAML, sandboxed).")
    ] = None,
    api_version: Annotated[
        str, typer.Option("--api-version", help="v1beta1 (0.5+, 1.0) or v1alpha1 (0.4.x).")
    ] = "v1beta1",
    prompt: Annotated[str | None, typer.Option("--prompt", help="Prompt of patterns that run the agent.")] = None,
    replicas: Annotated[int, typer.Option("--replicas", help="Warm pool size.")] = 2,
    storage: Annotated[str, typer.Option("--storage", help="PVC size.")] = "5Gi",
    egress: Annotated[
        list[str] | None,
        typer.Option(
            "--egress", help="network-custom-egress: CIDR[:PORT], repeatable; the fixed deny set inside it is excepted."
        ),
    ] = None,
    egress_except: Annotated[
        list[str] | None,
        typer.Option(
            "--egress-except", metavar="CIDR", help="A range each --egress CIDR holding it excepts; repeatable."
        ),
    ] = None,
    ttl: Annotated[int, typer.Option("--ttl", help="Claim ttlSecondsAfterFinished.")] = 300,
    autoscale_bounds: Annotated[
        str | None,
        typer.Option("--autoscale", metavar="MIN:MAX", help="warm-pool: add a scaler of the pool between MIN and MAX."),
    ] = None,
    autoscale_by: Annotated[
        str,
        typer.Option(
            "--autoscale-by",
            metavar="demand|cpu",
            help="demand: a pool-scaler Deployment on claims per minute; cpu: an HPA on the members' CPU.",
        ),
    ] = "demand",
    schedule: Annotated[
        str | None, typer.Option("--schedule", help="kro-*: the graph's default cron schedule (mode 2).")
    ] = None,
    output: Annotated[ManifestFormat, typer.Option("--output", "-o", help="yaml or json.")] = ManifestFormat.YAML,
) -> None:
    """Print the objects of an agent-sandbox pattern (dry run; nothing is sent)."""
    if pattern not in catalog.PATTERNS:
        exits.fail(settings_file.unknown_name_message("pattern", pattern, list(catalog.PATTERNS)))
    if autoscale_bounds is not None and pattern != "warm-pool":
        exits.fail(f"--autoscale scales a warm pool: use it with the warm-pool pattern, not {pattern}")
    if autoscale_by not in ("demand", "cpu"):
        exits.fail(f"invalid --autoscale-by '{errors.truncate(autoscale_by, 40)}': use demand or cpu")
    if namespace is not None:
        inputs.dns_label(namespace)
    try:
        version = models.ApiVersion(api_version)
    except ValueError:
        exits.fail(f"invalid --api-version '{api_version}': use v1beta1 or v1alpha1")
    if replicas < 0:
        exits.fail(f"invalid --replicas {replicas}: use 0 or more")
    if ttl < 0:
        exits.fail(f"invalid --ttl {ttl}: use 0 or more seconds")
    if schedule is not None and not pattern.startswith("kro-"):
        exits.fail(f"--schedule is for the kro-raw and kro-template patterns, not '{pattern}'")
    try:
        rules = tuple(parse_egress(e) for e in egress or ())
        excepted = tuple(parse_egress_except(e) for e in egress_except or ())
    except ValueError as exc:
        exits.fail(str(exc))
    try:
        pod = _load(provider_file, image).settings.pod if provider_file is not None else None
        opts = patterns.PatternOptions(
            name=name,
            namespace=namespace or (pod.settings.namespace if pod is not None else "default"),
            image=image,
            api_version=version,
            provider=pod,
            replicas=replicas,
            storage=storage,
            egress=rules,
            egress_except=excepted,
            ttl_seconds_after_finished=ttl,
            schedule=schedule,
            prompt=prompt or patterns.PatternOptions.prompt,
        )
        objects = catalog.render_pattern(pattern, opts)
        if autoscale_bounds is not None:
            low, high = autoscale.parse_bounds(autoscale_bounds)
            pool = next(o for o in objects if o["kind"] == "SandboxWarmPool")
            at = objects.index(pool) + 1
            if autoscale_by == "cpu":
                objects.insert(at, autoscale.warm_pool_hpa(pool, min_replicas=low, max_replicas=high))
            else:
                policy = demand.DemandPolicy(min_replicas=low, max_replicas=high)
                objects[at:at] = autoscale.demand_scaler(pool, policy)
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    emit_objects(objects, output)


async def _apply(provider: AgentSandboxProvider, cluster: clusters.ClusterConfig) -> list[apply.Applied]:
    async with await backends.connect(cluster) as api:
        return await provider.apply_template(api)


def apply_template(
    provider_file: Annotated[
        Path | None, typer.Option("--provider", help="Pod settings (the ephemeral provider's YAML, sandboxed).")
    ] = None,
    image: Annotated[str, typer.Option("--image", help="Runner image (without --provider).")] = patterns.DEFAULT_IMAGE,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Overrides the provider's.")] = None,
    template: Annotated[
        str | None, typer.Option("--template", help="SandboxTemplate name (default: the file's, else ironflow-agent).")
    ] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="SandboxWarmPool name (default: the template's).")] = None,
    replicas: Annotated[
        int | None, typer.Option("--replicas", help="Warm sandboxes to keep ready (default 1).")
    ] = None,
    api_version: Annotated[str | None, typer.Option("--api-version", help="v1beta1 (default) or v1alpha1.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the objects; send nothing.")] = False,
    output: Annotated[
        ManifestFormat, typer.Option("--output", "-o", help="yaml or json (with --dry-run).")
    ] = ManifestFormat.YAML,
    kubeconfig: shared_options.ProviderKubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Create or update the SandboxTemplate and SandboxWarmPool the provider's pod settings describe."""
    if namespace is not None:
        inputs.dns_label(namespace)
    # --kubeconfig / --context win; else the cluster the provider file names (as `agent` and `run` use).
    explicit = backends.kube_cluster(kubeconfig, context) if kubeconfig is not None or context is not None else None
    try:
        provider = _load(provider_file, image)
        if namespace is not None:
            provider = provider.namespace(namespace)
        if template is not None:
            provider = provider.template(template)
        if pool is not None or replicas is not None:
            s = provider.settings
            provider = provider.warm_pool(pool or s.warm_pool, replicas=s.replicas if replicas is None else replicas)
        if api_version is not None:
            provider = provider.api_version(api_version)
        objects = sandbox_steps.template_objects(provider.settings)
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    for warning in sandbox_steps.template_warnings(provider.settings):
        typer.echo(f"warning: {warning}", err=True)
    if dry_run:
        emit_objects(objects, output)
        return
    cluster = explicit or provider.cluster_config or clusters.DefaultCluster()
    err = Console(stderr=True)
    try:
        with err.status(f"applying template {provider.settings.template} in {provider.settings.namespace}..."):
            applied = asyncio.run(_apply(provider, cluster))
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    for item in applied:
        typer.echo(f"{item.kind.lower()}/{item.name} {item.action}")


async def _reap(
    cluster: clusters.ClusterConfig, namespace: str, version: models.ApiVersion, *, dry_run: bool
) -> claims.ClaimReapReport:

    async with await backends.connect(cluster) as api:
        return await claims.reap_claims(api, claims.resources(version).claims, namespace, dry_run=dry_run)


def reap(
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace to reap.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")] = False,
    api_version: Annotated[str, typer.Option("--api-version", help="v1beta1 (default) or v1alpha1.")] = "v1beta1",
    kubeconfig: shared_options.KubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Delete ironflow's SandboxClaims whose ironflow.io/expires-at has passed (a crashed worker's)."""
    inputs.dns_label(namespace)
    try:
        version = models.ApiVersion(api_version)
    except ValueError:
        exits.fail(f"invalid --api-version '{api_version}': use v1beta1 or v1alpha1")
    cluster = backends.kube_cluster(kubeconfig, context)
    try:
        report = asyncio.run(_reap(cluster, namespace, version, dry_run=dry_run))
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    verb = "would delete" if dry_run else "deleted"
    for name in report.claims:
        typer.echo(f"sandboxclaim/{name} {verb}")


def register(group: typer.Typer) -> None:
    """Add the agent-sandbox commands to the ``ironflow sandbox`` group."""
    group.command("render")(render)
    group.command("apply-template")(apply_template)
    group.command("reap")(reap)
