"""``ironflow sandbox suspend|resume|wait|pools|pool-scaler|install``: agent-sandbox objects after they start.

``suspend`` and ``resume`` set a Sandbox's ``operatingMode`` (v1beta1, agent-sandbox 1.0); NAME
is a SandboxClaim's (a session's id is one) or a raw Sandbox's
(:mod:`ironflow.agent_sandbox.lifecycle`), and the PVCs stay. ``wait`` is ``kubectl wait
--for=condition=…`` for a raw Sandbox, on the shared watch. ``pools`` reads each warm pool's
desired, ready and adopted-in-the-last-hour counts; ``pool-scaler`` keeps one pool's replicas
on its claims per minute (:mod:`ironflow.agent_sandbox.pool_scaler`). ``install`` prints the pinned controller's
manifests, or with ``--apply`` applies them server-side (:mod:`ironflow.agent_sandbox.install`).
Every command takes ``-n``, ``--kubeconfig`` and ``--context`` as the other cluster commands
do; bad input exits 2 with one line, an API failure 3, a wait that timed out 3
(:mod:`ironflow.cli.exits`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Final, TypeVar

import typer

from ironflow import errors, labels
from ironflow.agent_sandbox import claims, demand, install, lifecycle, models, pool_scaler
from ironflow.cli import backends, exits, inputs, shared_options, tables
from ironflow.cli.formats import ManifestFormat, ResultFormat, document, emit_objects
from ironflow.cli.stores import run_async
from ironflow.kube import api as kube
from ironflow.sessions.values import parse_duration

__all__ = ["install_controller", "parse_condition", "pools", "register", "resume", "scale_pool", "suspend", "wait"]

T = TypeVar("T")

_CONDITION: Final = re.compile(r"condition=([A-Za-z][A-Za-z0-9]*)(?:=(True|False|Unknown|true|false|unknown))?")

NamespaceOption = Annotated[str, typer.Option("--namespace", "-n", help="The objects' namespace.")]
OutputOption = Annotated[ResultFormat, typer.Option("--output", "-o", help="text, json or yaml.")]
TimeoutOption = Annotated[str, typer.Option("--timeout", help="How long to wait, e.g. 90s, 5m.")]


def parse_condition(text: str) -> tuple[str, str]:
    """``condition=TYPE[=STATUS]`` as (type, status), status ``True`` by default (pure).

    >>> parse_condition("condition=Finished"), parse_condition("condition=Ready=false")
    (('Finished', 'True'), ('Ready', 'False'))

    Raises:
        ConfigError: anything else (``delete`` and ``jsonpath=`` are kubectl's, not ours).
    """
    match = _CONDITION.fullmatch(text.strip())
    if match is None:
        raise errors.ConfigError(f"invalid --for '{errors.truncate(text, 60)}': use condition=TYPE[=STATUS]")
    return match[1], (match[2] or "True").capitalize()


def _name(value: str, what: str) -> str:
    if not labels.is_dns_subdomain(value):
        exits.fail(f"invalid {what} name '{errors.truncate(value, 60)}': use lowercase letters, digits, '-' and '.'")
    return value


def _duration(text: str, option: str) -> float:
    try:
        return parse_duration(text)
    except errors.ConfigError as exc:
        exits.fail(f"{option}: {exc.message}")


def _call(kubeconfig: Path | None, context: str | None, action: Callable[[kube.KubeApi], Awaitable[T]]) -> T:
    """Run ``action`` on a client of the chosen cluster; every error is one line with its exit code."""
    cluster = backends.kube_cluster(kubeconfig, context)

    async def go() -> T:
        async with await backends.connect(cluster) as api:
            return await action(api)

    return run_async(go())


def _mode(
    name: str,
    namespace: str,
    mode: models.OperatingMode,
    wait_s: float | None,
    kubeconfig: Path | None,
    context: str | None,
) -> lifecycle.Target:
    _name(name, "sandbox or claim")
    inputs.dns_label(namespace)
    return _call(kubeconfig, context, lambda api: lifecycle.set_mode(api, namespace, name, mode, timeout_s=wait_s))


def _print_target(target: lifecycle.Target, done: str, output: ResultFormat) -> None:
    if output is ResultFormat.TEXT:
        typer.echo(f"{target.describe()} {done}")
    else:
        typer.echo(document({"sandbox": target.sandbox, "claim": target.claim, "state": done}, output))


def suspend(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A SandboxClaim (or session id) or a Sandbox.")],
    namespace: NamespaceOption = "default",
    wait_: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until the pod is gone.")] = True,
    timeout: TimeoutOption = "2m",
    output: OutputOption = ResultFormat.TEXT,
    kubeconfig: shared_options.KubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Suspend a sandbox: its pod is deleted, its PVCs and claim kept (operatingMode Suspended)."""
    limit = _duration(timeout, "--timeout") if wait_ else None
    target = _mode(name, namespace, models.OperatingMode.SUSPENDED, limit, kubeconfig, context)
    _print_target(target, "suspended" if wait_ else "suspending", output)


def resume(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A SandboxClaim (or session id) or a Sandbox.")],
    namespace: NamespaceOption = "default",
    wait_: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until it is Ready again.")] = True,
    timeout: TimeoutOption = "5m",
    output: OutputOption = ResultFormat.TEXT,
    kubeconfig: shared_options.KubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Resume a suspended sandbox: a new pod on the same PVCs (operatingMode Running)."""
    limit = _duration(timeout, "--timeout") if wait_ else None
    target = _mode(name, namespace, models.OperatingMode.RUNNING, limit, kubeconfig, context)
    _print_target(target, "resumed" if wait_ else "resuming", output)


def wait(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The Sandbox.")],
    for_: Annotated[str, typer.Option("--for", metavar="condition=TYPE[=STATUS]", help="What to wait for.")],
    namespace: NamespaceOption = "default",
    timeout: TimeoutOption = "30s",
    output: OutputOption = ResultFormat.TEXT,
    kubeconfig: shared_options.KubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Wait until a raw Sandbox has a condition (kubectl wait --for=condition=Finished sandbox/NAME)."""
    _name(name, "sandbox")
    inputs.dns_label(namespace)
    try:
        kind, status = parse_condition(for_)
    except errors.ConfigError as exc:
        exits.fail_for(exc)
    limit = _duration(timeout, "--timeout")
    found = _call(
        kubeconfig,
        context,
        lambda api: lifecycle.wait_condition(api, namespace, name, kind, status=status, timeout_s=limit),
    )
    if output is ResultFormat.TEXT:
        typer.echo(f"sandbox/{name} condition met")
    else:
        typer.echo(document(found, output))


def pools(
    namespace: NamespaceOption = "default",
    output: OutputOption = ResultFormat.TEXT,
    kubeconfig: shared_options.KubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """The status of each SandboxWarmPool: desired, ready, and claims adopted in the last hour."""
    inputs.dns_label(namespace)
    found = _call(kubeconfig, context, lambda api: lifecycle.pool_status(api, namespace))
    if output is not ResultFormat.TEXT:
        typer.echo(document([s.to_json() for s in found], output))
        return
    table = tables.new("NAME", "TEMPLATE", "DESIRED", "CURRENT", "READY", "ADOPTED (1H)")
    for s in found:
        table.add_row(s.name, s.template, str(s.desired), str(s.replicas), str(s.ready), str(s.adopted_last_hour))
    typer.echo(tables.render(table, width=tables.stdout_width()))


def scale_pool(
    pool: Annotated[str, typer.Option("--pool", help="The SandboxWarmPool to scale.")],
    min_replicas: Annotated[int, typer.Option("--min", help="Never fewer members.")] = 1,
    max_replicas: Annotated[int, typer.Option("--max", help="Never more members.")] = 10,
    spare: Annotated[int, typer.Option("--spare", help="Ready members kept beyond the expected claims.")] = 1,
    ready_time: Annotated[str, typer.Option("--ready-time", help="How long a new member takes to get ready.")] = "30s",
    window: Annotated[str, typer.Option("--window", help="The claims of this long make the rate.")] = "60s",
    cooldown: Annotated[str, typer.Option("--cooldown", help="Wait this long after a change to step down.")] = "5m",
    namespace: NamespaceOption = "default",
    kubeconfig: shared_options.KubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Keep a SandboxWarmPool's replicas on its claims per minute (writes /scale; runs until stopped)."""
    _name(pool, "pool")
    inputs.dns_label(namespace)
    policy = demand.DemandPolicy(
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        spare=spare,
        ready_s=_duration(ready_time, "--ready-time"),
        window_s=_duration(window, "--window"),
        cooldown_s=_duration(cooldown, "--cooldown"),
    )
    try:
        policy.validate()
    except errors.ConfigError as exc:
        exits.fail_for(exc)

    def report(decision: demand.Decision, written: bool) -> None:
        if written:
            typer.echo(f"sandboxwarmpool/{pool} {decision.reason}")

    async def scale(api: kube.KubeApi) -> None:
        await api.get(claims.resources().pools, namespace, pool, subresource="scale")  # one line if absent
        await pool_scaler.PoolScaler(api, namespace, pool, policy, report=report).run()

    _call(kubeconfig, context, scale)


def install_controller(
    apply_: Annotated[bool, typer.Option("--apply", help="Apply them server-side (default: print them).")] = False,
    image: Annotated[str, typer.Option("--image", help="The controller's image.")] = install.DEFAULT_IMAGE,
    output: Annotated[
        str, typer.Option("--output", "-o", help="yaml or json (the manifests); with --apply: text, json or yaml.")
    ] = "",
    kubeconfig: shared_options.KubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Print (or with --apply apply) the pinned agent-sandbox controller, v1.0.3, with its CRDs and RBAC."""
    try:
        objects = install.controller_objects(image)
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    if not apply_:
        try:
            fmt = ManifestFormat(output or "yaml")
        except ValueError:
            exits.fail(f"invalid --output '{output}': use yaml or json")
        emit_objects(objects, fmt)
        return
    try:
        result = ResultFormat(output or "text")
    except ValueError:
        exits.fail(f"invalid --output '{output}' with --apply: use text, json or yaml")
    done = _call(kubeconfig, context, lambda api: install.apply_objects(api, objects))
    if result is not ResultFormat.TEXT:
        rows: list[dict[str, Any]] = [
            {"kind": i.kind, "name": i.name, "namespace": i.namespace, "changed": i.changed} for i in done
        ]
        typer.echo(document(rows, result))
        return
    for item in done:
        typer.echo(f"{item.kind.lower()}/{item.name} {'applied' if item.changed else 'unchanged'}")


def register(group: typer.Typer) -> None:
    """Add the lifecycle commands to the ``ironflow sandbox`` group."""
    group.command("suspend")(suspend)
    group.command("resume")(resume)
    group.command("wait")(wait)
    group.command("pools")(pools)
    group.command("pool-scaler")(scale_pool)
    group.command("install")(install_controller)
