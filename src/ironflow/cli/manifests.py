"""``ironflow manifests``: print what a cluster administrator applies once, for given names.

Thin over :func:`ironflow.cluster.setup.render_documents`: options become a
:class:`~ironflow.cluster.setup.ClusterSetup`, the objects go to stdout as commented YAML
documents or one JSON ``List`` (both ``kubectl apply -f -`` ready). Reading a profile
directory is the only I/O. Bad input exits 2 with one line on stderr naming the problem.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ironflow import errors
from ironflow.cli.exits import fail
from ironflow.cli.formats import ManifestFormat
from ironflow.cluster import documents, network, sandbox_router, setup, workloads
from ironflow.k8s.settings import K8sResources
from ironflow.kube import quantities

__all__ = [
    "manifests",
    "parse_agent_resources",
    "parse_egress_profile",
    "parse_resources",
    "read_profile_dir",
    "register",
]


def parse_egress_profile(text: str) -> network.EgressProfile:
    """``NAME=HOST[,HOST...]`` as an egress profile.

    >>> parse_egress_profile("gitlab=gitlab.com").hosts
    ('gitlab.com',)
    """
    name, sep, hosts = text.partition("=")
    if not sep:
        raise errors.ConfigError(f"--egress-profile '{text}' must read NAME=HOST[,HOST...], e.g. gitlab=gitlab.com")
    return network.EgressProfile(name.strip(), tuple(h.strip() for h in hosts.split(",") if h.strip()))


def parse_resources(option: str, text: str | None, base: workloads.Resources) -> workloads.Resources:
    """``requests.cpu=500m,limits.memory=1Gi`` over ``base``; each quantity checked.

    >>> parse_resources("--worker-resources", "limits.cpu=2", workloads.WORKER_RESOURCES).cpu_limit
    '2'
    """
    if text is None:
        return base
    values: dict[str, str] = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in workloads.RESOURCE_KEYS:
            raise errors.ConfigError(
                f"{option} '{item}' must read KEY=QUANTITY with KEY one of {', '.join(workloads.RESOURCE_KEYS)}"
            )
        problem = quantities.quantity_problem(f"{option} {key.strip()}", value.strip(), example="500m")
        if problem is not None:
            raise errors.ConfigError(problem)
        values[key.strip()] = value.strip()
    return base.with_values(values)


def parse_agent_resources(text: str | None) -> tuple[tuple[str, str], ...]:
    """``cpu_limit=4,ephemeral_storage_limit=none`` as the provider file's ``resources`` keys, checked there.

    >>> parse_agent_resources("cpu_limit=4, memory_limit=8Gi")
    (('cpu_limit', '4'), ('memory_limit', '8Gi'))
    """
    pairs: list[tuple[str, str]] = []
    for item in (i.strip() for i in (text or "").split(",") if i.strip()):
        key, sep, value = item.partition("=")
        if not sep:
            raise errors.ConfigError(f"--agent-resources '{item}' must read KEY=QUANTITY, e.g. memory_limit=8Gi")
        pairs.append((key.strip(), value.strip()))
    K8sResources.from_keys(dict(pairs), where="--agent-resources")  # the worker's provider file would refuse it
    return tuple(pairs)


def read_profile_dir(root: Path) -> dict[str, str]:
    """Every file below ``root`` by relative path (hidden files such as ``.mcp.json`` included)."""
    if not root.is_dir():
        raise errors.ConfigError(f"--profile-dir {root} is not a directory")
    files: dict[str, str] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            files[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise errors.ConfigError(
                f"--profile-dir: {path} is not UTF-8 text; a profile ConfigMap holds text files only"
            ) from None
    if not files:
        raise errors.ConfigError(f"--profile-dir {root} holds no file")
    return files


def manifests(
    namespace: Annotated[
        str, typer.Option("-n", "--namespace", help="Namespace of the agent pods.")
    ] = setup.AGENTS_NAMESPACE,
    worker_namespace: Annotated[
        str, typer.Option("--worker-namespace", help="Namespace of the worker's ServiceAccount.")
    ] = setup.WORKER_NAMESPACE,
    worker_service_account: Annotated[
        str, typer.Option("--worker-service-account", help="The worker's ServiceAccount.")
    ] = setup.WORKER_SERVICE_ACCOUNT,
    auth_proxy: Annotated[
        str | None,
        typer.Option(
            "--auth-proxy",
            help="Proxy URL: http://<service>.<namespace>, an IP, or (with --cilium) a host; agents reach only it.",
        ),
    ] = None,
    cilium: Annotated[bool, typer.Option("--cilium", help="Cilium FQDN policies instead of plain ones.")] = False,
    gvisor: Annotated[bool, typer.Option("--gvisor", help="Add the gVisor RuntimeClass (handler runsc).")] = False,
    preset: Annotated[
        list[str] | None,
        typer.Option("--preset", help="Managed-settings preset to include (repeat); default: locked and readonly."),
    ] = None,
    egress_profile: Annotated[
        list[str] | None,
        typer.Option("--egress-profile", help="NAME=HOST[,HOST] opened to pods with that profile (Cilium; repeat)."),
    ] = None,
    no_egress_profiles: Annotated[
        bool, typer.Option("--no-egress-profiles", help="Render no per-profile opening (not even gitlab).")
    ] = False,
    environment_claims: Annotated[
        bool, typer.Option("--environment-claims", help="Grant the PVC verbs of persistent environments.")
    ] = False,
    session_volumes: Annotated[
        bool,
        typer.Option("--session-volumes", help="Grant the verbs of sessions' HOME claims and VolumeSnapshots."),
    ] = False,
    check_rbac: Annotated[
        bool, typer.Option("--check-rbac", help="Add the account `ironflow check` runs with (pods/exec).")
    ] = False,
    agent_sandbox_rbac: Annotated[
        bool, typer.Option("--agent-sandbox-rbac", help="Grant the worker what the agent-sandbox backend does.")
    ] = False,
    auth_proxy_deployment: Annotated[
        bool,
        typer.Option("--auth-proxy-deployment", help="Add the proxy's Deployment and Service (needs --auth-proxy)."),
    ] = False,
    auth_proxy_image: Annotated[
        str, typer.Option("--auth-proxy-image", help="The proxy's image (the default: bash scripts/images build).")
    ] = workloads.DEFAULT_AUTH_PROXY_IMAGE,
    auth_proxy_replicas: Annotated[int, typer.Option("--auth-proxy-replicas", help="Proxy replicas.")] = 2,
    auth_proxy_resources: Annotated[
        str | None,
        typer.Option(
            "--auth-proxy-resources", help="requests.cpu=…,limits.memory=… for the proxy.", show_default=False
        ),
    ] = None,
    worker_deployment: Annotated[
        bool, typer.Option("--worker-deployment", help="Add the worker's Deployment and provider file.")
    ] = False,
    worker_image: Annotated[
        str, typer.Option("--worker-image", help="The worker's image (the default: bash scripts/images build).")
    ] = workloads.DEFAULT_WORKER_IMAGE,
    runner_image: Annotated[
        str,
        typer.Option(
            "--runner-image",
            help="The agent pods' image, in the worker's provider file (the default: bash scripts/images build).",
        ),
    ] = workloads.DEFAULT_RUNNER_IMAGE,
    worker_resources: Annotated[
        str | None,
        typer.Option("--worker-resources", help="requests.cpu=…,limits.memory=… for the worker.", show_default=False),
    ] = None,
    agent_resources: Annotated[
        str | None,
        typer.Option(
            "--agent-resources",
            help="cpu_request=…,ephemeral_storage_limit=… (none drops one) for the agent pods, in the provider file.",
            show_default=False,
        ),
    ] = None,
    profile_dir: Annotated[
        Path | None,
        typer.Option("--profile-dir", help="Claude profile directory: one ConfigMap per sub-directory."),
    ] = None,
    with_sandbox_router: Annotated[
        bool,
        typer.Option(
            "--sandbox-router",
            help="Add the in-cluster Sandbox Router (sandbox-router-svc in agent-sandbox-system, the worker image).",
        ),
    ] = False,
    output: Annotated[ManifestFormat, typer.Option("--output", "-o", help="yaml or json.")] = ManifestFormat.YAML,
) -> None:
    """Print the namespace, RBAC, network policies, RuntimeClass and presets of a cluster (and its Deployments)."""
    try:
        profiles: tuple[network.EgressProfile, ...] | None = None
        if no_egress_profiles:
            profiles = ()
        elif egress_profile:
            profiles = tuple(parse_egress_profile(p) for p in egress_profile)
        config = setup.ClusterSetup(
            namespace=namespace,
            worker_namespace=worker_namespace,
            worker_service_account=worker_service_account,
            auth_proxy_url=auth_proxy,
            cilium=cilium,
            gvisor=gvisor,
            presets=tuple(preset) if preset else setup.ClusterSetup().presets,
            egress_profiles=profiles if profiles is not None else setup.ClusterSetup().egress_profiles,
            environment_claims=environment_claims,
            session_volumes=session_volumes,
            check_rbac=check_rbac,
            agent_sandbox_rbac=agent_sandbox_rbac,
            auth_proxy_deployment=workloads.AuthProxyDeployment(
                image=auth_proxy_image,
                replicas=auth_proxy_replicas,
                resources=parse_resources(
                    "--auth-proxy-resources", auth_proxy_resources, workloads.AUTH_PROXY_RESOURCES
                ),
            )
            if auth_proxy_deployment
            else None,
            worker_deployment=workloads.WorkerDeployment(
                image=worker_image,
                runner_image=runner_image,
                resources=parse_resources("--worker-resources", worker_resources, workloads.WORKER_RESOURCES),
                agent_resources=parse_agent_resources(agent_resources),
            )
            if worker_deployment
            else None,
            sandbox_router=sandbox_router.SandboxRouterDeployment(image=worker_image) if with_sandbox_router else None,
        )
        profile = read_profile_dir(profile_dir) if profile_dir is not None else None
        docs = setup.render_documents(config, profile=profile)
    except errors.ConfigError as exc:
        fail(exc.message)
    if output is ManifestFormat.JSON:
        sys.stdout.write(documents.dump_json(d.body for d in docs))
    else:
        sys.stdout.write(documents.file_text(docs))
    kinds = sorted({str(d.body["kind"]) for d in docs})
    print(f"rendered {len(docs)} objects ({', '.join(kinds)})", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("manifests")(manifests)
