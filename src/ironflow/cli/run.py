"""``ironflow run`` and ``ironflow worker``: durable workflows from the shell.

Thin over :mod:`ironflow.engine`. ``run`` queues a run (and with ``--wait`` executes it
in this process, progress on stderr, the output as JSON on stdout); ``worker`` takes
queued runs until Ctrl-C (``ironflow runs …`` in :mod:`ironflow.cli.runs` inspects them),
logging a line per run and step start and end on stderr (text, or JSON objects), and with
``--metrics-port`` serves ``/metrics`` and ``/healthz``. The store is :mod:`ironflow.cli.stores`'s ``--store``.

Exit codes are :mod:`ironflow.cli.exits`'s: 0 done, 1 the run failed or was cancelled, 2 bad
input (one line on stderr naming the problem), 3 the store or the sandbox runtime could not be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from ironflow import errors, log_lines, settings_file
from ironflow.cli import backends, exits, inputs, shared_options, verbosity
from ironflow.cli.backends import Backend, Isolation
from ironflow.cli.formats import TextFormat, printable
from ironflow.cli.shared_options import StoreOption
from ironflow.cli.stores import opened, plain, run_async
from ironflow.engine import accounts, budgets, events, loading, model
from ironflow.engine.metrics import DEFAULT_HOST, WorkerMetrics
from ironflow.engine.run_log import RunLog
from ironflow.engine.runner import Runner
from ironflow.engine.store import Store
from ironflow.engine.worker import Worker
from ironflow.kube.clusters import ClusterConfig, describe_cluster
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION, NO_PROXY_FOR_ACCOUNTS
from ironflow.sessions.values import parse_duration

__all__ = ["AccountOption", "account_pool", "parse_accounts", "register"]

_err = Console(stderr=True, soft_wrap=True, highlight=False)
_log = logging.getLogger("ironflow.cli.worker")


AccountOption = Annotated[
    list[str] | None,
    typer.Option(
        "--account",
        help="A Provider Account: NAME=env:VAR or NAME=secret:[NS/]SECRET/KEY[,kind=api_key]; repeatable.",
        show_default=False,
    ),
]
RoleCapOption = Annotated[
    list[str] | None,
    typer.Option(
        "--role-cap",
        help="ROLE=USD/PERIOD (day, week or month; month when unsaid): no step of ROLE starts once it spent USD"
        " this UTC period; repeatable.",
        show_default=False,
    ),
]
CapacityWaitOption = Annotated[
    float, typer.Option("--max-capacity-wait", help="Seconds a step waits for an account outside a rejected window.")
]


def parse_accounts(specs: list[str] | None) -> list[accounts.ProviderAccount]:
    try:
        return [accounts.parse_account(s) for s in specs or ()]
    except errors.ConfigError as exc:
        exits.fail(exc.message)


def _role_caps(specs: list[str] | None) -> dict[str, budgets.RoleCap]:
    """``--role-cap`` values by role; one line, exit 2, for a bad one."""
    try:
        return budgets.parse_role_caps(specs or ())
    except errors.ConfigError as exc:
        exits.fail(f"--role-cap: {exc.message}")


@contextlib.asynccontextmanager
async def account_pool(
    store: Store,
    parsed: list[accounts.ProviderAccount],
    max_wait_s: float,
    cluster: Callable[[], ClusterConfig | None],
    observers: Sequence[events.Observer] = (),
) -> AsyncIterator[accounts.AccountPool | None]:
    """The accounts' pool; a Kubernetes client only if a Secret is referenced, on ``cluster()``
    (the provider file's, so Secrets are read where the pods run; None: the default kubeconfig)."""
    if not parsed:
        yield None
        return
    if not any(a.credential.secret is not None for a in parsed):
        yield accounts.AccountPool(store, parsed, max_wait_s=max_wait_s, observers=observers)
        return
    chosen = cluster()
    try:
        kube = await backends.connect(chosen)
    except errors.IronflowError as exc:
        where = (
            "no cluster is configured" if chosen is None else f"its cluster is unusable ({describe_cluster(chosen)})"
        )
        exits.fail(f"an account reads a Kubernetes Secret, but {where}: {exc.message}")
    try:
        reader = accounts.KubeSecretReader(kube)
        yield accounts.AccountPool(store, parsed, max_wait_s=max_wait_s, secret_reader=reader, observers=observers)
    finally:
        await kube.close()


# --- progress ----------------------------------------------------------------------------


async def _print_steps(store: Store, run_id: str, seen: dict[tuple[str, int], str], depth: int = 0) -> None:
    """Print the steps (and sub-workflow steps, indented) whose state changed since last time."""
    marks = {"running": "[cyan]…[/]", "succeeded": "[green]✓[/]", "failed": "[red]✗[/]"}
    for step in await store.steps(run_id):
        key = (run_id, step.position)
        if seen.get(key) != step.status:
            seen[key] = step.status
            took = f" {step.finished_at - step.started_at:.1f}s" if step.finished_at else ""
            _err.print(f"{'  ' * depth}{marks[step.status]} {step.name} ({step.kind}){took}", highlight=False)
        if step.child_run_id is not None:
            await _print_steps(store, step.child_run_id, seen, depth + 1)


async def _watch(store: Store, run_id: str, stop: asyncio.Event) -> None:
    """Print each step as it starts and ends, on stderr, until ``stop`` (then once more)."""
    seen: dict[tuple[str, int], str] = {}
    while not stop.is_set():
        await _print_steps(store, run_id, seen)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)
    await _print_steps(store, run_id, seen)


# --- ironflow run ------------------------------------------------------------------------


def _parse_input(raw: str | None) -> Any:
    if raw is None:
        return None
    text = raw
    try:
        if raw.startswith("@"):
            path = Path(raw[1:])
            if not path.is_file():
                exits.fail(f"--input file '{path}' not found")
            text = settings_file.read_text(path, what="--input file")
        return settings_file.decode(text, source="--input", as_json=True)
    except errors.ConfigError as exc:
        exits.fail(f"{exc.message}; pass a JSON value")


def _resolve_ref(ref: str) -> str:
    """Check the workflow loads, and make a file reference absolute so any worker finds it."""
    try:
        workflow = loading.load_workflow(ref)
    except errors.ConfigError as exc:
        exits.fail(exc.message)
    except Exception as exc:  # the user's file raised while importing
        exits.fail(f"cannot load workflow {ref!r}: {type(exc).__name__}: {exc}")
    return loading.workflow_ref(workflow)


async def _execute_until_finished(store: Store, worker: Worker, run_id: str) -> None:
    """Execute the run here; a run put back in the queue (its release failed) is taken again when due."""
    while True:
        claimed = await store.claim_run(worker.id, worker.lease_s, run_id=run_id)
        if claimed is not None:
            await worker.execute(claimed)
            continue
        current = await store.get_run(run_id)
        if current is None or current.finished:
            return
        if current.status is model.RunStatus.RUNNING:  # another worker holds it now: follow it
            await asyncio.sleep(0.5)
            continue
        if current.error:
            said = escape(printable(current.error["message"]))  # a step's output: neither markup nor escapes
            _err.print(f"[yellow]run requeued:[/] {said}; trying again when due", markup=True)
        await asyncio.sleep(max(current.available_at - time.time(), 0.05))


def queued_note(run_id: str, backend: Backend) -> str:
    """What happens to a queued run, for stderr (pure; the store's URL is not repeated: it may
    hold a password).

    >>> print(queued_note("01a", Backend.LOCAL))
    run 01a queued: an `ironflow worker` on the same --store takes it (backend local);
    `ironflow logs 01a -f` follows it, `ironflow runs cancel 01a` cancels it
    """
    return (
        f"run {run_id} queued: an `ironflow worker` on the same --store takes it (backend {backend});\n"
        f"`ironflow logs {run_id} -f` follows it, `ironflow runs cancel {run_id}` cancels it"
    )


async def _run(
    ref: str,
    input: Any,
    backend: Backend,
    store_url: str | None,
    wait: bool,
    providers: backends.Providers,
    lease_s: float,
    parsed_accounts: list[accounts.ProviderAccount],
    max_wait_s: float,
    deadline_s: float | None = None,
    role_caps: Mapping[str, budgets.RoleCap] | None = None,
) -> int:
    async with (
        opened(store_url) as store,
        providers,
        account_pool(store, parsed_accounts, max_wait_s, lambda: providers.cluster_for(backend)) as pool,
    ):
        if wait:
            provider = providers.get(backend)  # fail now, with exit 2, when the backend cannot be built here
            if pool is not None and provider.account_kind() != ACCOUNT_KIND_CLAUDE_SUBSCRIPTION:
                exits.fail(f"--account on --backend {backend}: {NO_PROXY_FOR_ACCOUNTS}")
        deadline_at = None if deadline_s is None else time.time() + deadline_s
        run = await store.create_run(
            model.RunRecord(id=model.new_id(), workflow=ref, input=input, backend=backend, deadline_at=deadline_at)
        )
        if not wait:
            print(run.id)
            typer.echo(queued_note(run.id, backend), err=True)
            return 0
        _err.print(f"run {run.id} ({ref}) on {backend}", highlight=False)
        worker = Worker(
            store,
            lambda r: Runner(store, providers.get(r.backend), accounts=pool, role_caps=role_caps or {}),
            lease_s=lease_s,
        )
        stop = asyncio.Event()
        watcher = asyncio.create_task(_watch(store, run.id, stop))
        try:
            await _execute_until_finished(store, worker, run.id)
        finally:
            stop.set()
            await watcher
        final = await store.get_run(run.id)
        assert final is not None
        if final.status is model.RunStatus.SUCCEEDED:
            print(json.dumps(plain(final.output), indent=2))
            return 0
        message = final.error["message"] if final.error else final.status
        _err.print(f"[red]run {run.id} {final.status}:[/] {escape(printable(message))}", highlight=False)
        return exits.EXIT_STEP_FAILED


def run(
    workflow: Annotated[str, typer.Argument(help="FILE.py:function or package.module:function.", show_default=False)],
    input: Annotated[str | None, typer.Option("--input", help="The workflow's input: JSON, or @file.json.")] = None,
    backend: Annotated[Backend, typer.Option(help="Where agent steps run.")] = Backend.LOCAL,
    store: StoreOption = None,
    wait: Annotated[bool, typer.Option("--wait", help="Execute the run here and print its output.")] = False,
    fake_model: Annotated[
        bool,
        typer.Option(
            "--fake-model", help="With --wait: answer agent steps from the offline model; --fake-model=FILE scripts it."
        ),
    ] = False,
    fake_model_script: Annotated[Path | None, typer.Option("--fake-model-script", hidden=True)] = None,
    isolation: Annotated[Isolation, typer.Option(help="Local sandbox: bwrap, gvisor (runsc) or docker.")] = (
        Isolation.BWRAP
    ),
    provider_file: Annotated[
        Path | None, typer.Option("--provider", help="Provider settings file for --backend k8s / agent-sandbox.")
    ] = None,
    lease: Annotated[float, typer.Option(help="Lease seconds while executing.", min=1.0)] = 30.0,
    account: AccountOption = None,
    max_capacity_wait: CapacityWaitOption = 300.0,
    role_cap: RoleCapOption = None,
    deadline: Annotated[
        str | None,
        typer.Option(
            "--deadline",
            help="The whole run ends within this time from now (90s, 30m, 2h), across resumes and retries.",
        ),
    ] = None,
) -> None:
    """Queue a run of WORKFLOW (a worker takes it), or execute it here with --wait."""
    if fake_model and not wait:
        exits.fail("--fake-model only applies with --wait (a worker has its own --fake-model)")
    fake = backends.fake_script(fake_model, fake_model_script, backends.BUILTIN_RUN_REPLY)
    value = _parse_input(input)
    ref = _resolve_ref(workflow)
    parsed = parse_accounts(account)
    if parsed and not wait:
        exits.fail("--account only applies with --wait (give the worker its accounts)")
    try:
        deadline_s = None if deadline is None else parse_duration(deadline)
    except errors.ConfigError as exc:
        exits.fail(f"--deadline: {exc.message}")
    caps = _role_caps(role_cap)
    if caps and not wait:
        exits.fail("--role-cap only applies with --wait (give the worker its caps)")
    providers = backends.Providers(isolation=isolation, provider_file=provider_file, fake=fake)
    raise typer.Exit(
        run_async(_run(ref, value, backend, store, wait, providers, lease, parsed, max_capacity_wait, deadline_s, caps))
    )


# --- ironflow worker ---------------------------------------------------------------------


@contextlib.contextmanager
def _log_lines_on_stderr(fmt: TextFormat) -> Iterator[None]:
    """Every ``ironflow`` logger's records, info and up, as one line each on stderr while the worker runs."""
    handler = logging.StreamHandler()
    handler.setFormatter(log_lines.JsonFormatter() if fmt is TextFormat.JSON else log_lines.TextFormatter())
    root = logging.getLogger("ironflow")
    saved = root.handlers[:], root.level, root.propagate
    root.handlers[:], root.propagate = [handler], False
    root.setLevel(verbosity.log_level(logging.INFO))
    try:
        yield
    finally:
        handler.flush()
        root.handlers[:], level, root.propagate = saved
        root.setLevel(level)


@contextlib.asynccontextmanager
async def _pages(
    worker: Worker, store: Store, metrics: WorkerMetrics | None, at: tuple[str, int] | None
) -> AsyncIterator[str | None]:
    """``/metrics`` and ``/healthz`` on ``at`` (host, port) while the worker runs; the metrics URL, or None."""
    if metrics is None or at is None:
        yield None
        return
    from ironflow.engine import monitoring  # aiohttp's server: only a worker with --metrics-port

    pages = monitoring.serve(monitoring.create_app(worker, store, metrics), host=at[0], port=at[1])
    async with contextlib.AsyncExitStack() as stack:
        try:
            serving = await stack.enter_async_context(pages)
        except errors.ConfigError as exc:  # the address cannot be bound
            exits.fail_for(exc)
        yield f"{serving.url}/metrics"


async def _work(
    store_url: str | None,
    concurrency: int,
    lease_s: float,
    providers: backends.Providers,
    parsed_accounts: list[accounts.ProviderAccount],
    max_wait_s: float,
    metrics_at: tuple[str, int] | None,
    role_caps: Mapping[str, budgets.RoleCap],
) -> int:
    metrics = WorkerMetrics() if metrics_at is not None else None
    observers: list[events.Observer] = [RunLog(), *([metrics] if metrics is not None else [])]
    async with (
        opened(store_url) as store,
        providers,
        account_pool(store, parsed_accounts, max_wait_s, lambda: providers.cluster_for(None), observers) as pool,
    ):
        # Before any run is taken: what this worker pod's earlier life (same uid) left.
        swept = await providers.sweep_earlier_life(os.environ)
        if swept is not None:
            _log.info("%s", swept)
        worker = Worker(
            store,
            lambda r: Runner(store, providers.get(r.backend), accounts=pool, observers=observers, role_caps=role_caps),
            concurrency=concurrency,
            lease_s=lease_s,
            observers=observers,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with _pages(worker, store, metrics, metrics_at) as url:
            fields = {"worker": worker.id, "concurrency": concurrency, "metrics": url}
            _log.info("worker taking runs; Ctrl-C stops", extra={"fields": fields})
            await worker.run(stop=stop)
        _log.info("worker stopped", extra={"fields": {"worker": worker.id}})
        return 0


def worker(
    store: StoreOption = None,
    concurrency: Annotated[int, typer.Option(help="Runs executed at once.", min=1)] = 1,
    lease: Annotated[float, typer.Option(help="Lease seconds; renewed every third.", min=1.0)] = 30.0,
    fake_model: Annotated[
        bool,
        typer.Option("--fake-model", help="Answer agent steps from the offline model; --fake-model=FILE scripts it."),
    ] = False,
    fake_model_script: Annotated[Path | None, typer.Option("--fake-model-script", hidden=True)] = None,
    isolation: Annotated[Isolation, typer.Option(help="Local sandbox: bwrap, gvisor (runsc) or docker.")] = (
        Isolation.BWRAP
    ),
    provider_file: Annotated[Path | None, typer.Option("--provider", help="Provider settings file for k8s.")] = None,
    account: AccountOption = None,
    max_capacity_wait: CapacityWaitOption = 300.0,
    role_cap: RoleCapOption = None,
    metrics_port: Annotated[
        str | None,
        typer.Option(
            "--metrics-port", help="Serve /metrics and /healthz on this port (0: any free one).", show_default=False
        ),
    ] = None,
    metrics_host: Annotated[
        str | None,
        typer.Option(
            "--metrics-host",
            help=f"With --metrics-port: the address to listen on (default {DEFAULT_HOST}).",
            show_default=False,
        ),
    ] = None,
    log_format: Annotated[
        TextFormat, typer.Option("--log-format", help="Log lines on stderr: text, or one JSON object each.")
    ] = TextFormat.TEXT,
) -> None:
    """Take queued runs from the store and execute them until Ctrl-C."""
    if metrics_host is not None and metrics_port is None:
        exits.fail("--metrics-host only applies with --metrics-port")
    metrics_at = None
    if metrics_port is not None:
        metrics_at = (metrics_host or DEFAULT_HOST, inputs.port(metrics_port, "--metrics-port"))
    parsed = parse_accounts(account)
    caps = _role_caps(role_cap)
    fake = backends.fake_script(fake_model, fake_model_script, backends.BUILTIN_RUN_REPLY)
    providers = backends.Providers(isolation=isolation, provider_file=provider_file, fake=fake)
    with _log_lines_on_stderr(log_format):
        code = run_async(_work(store, concurrency, lease, providers, parsed, max_capacity_wait, metrics_at, caps))
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``run`` and ``worker`` to the ``ironflow`` app."""
    app.command("run", cls=shared_options.FakeModelCommand)(run)
    app.command("worker", cls=shared_options.FakeModelCommand)(worker)
