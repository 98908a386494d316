"""``ironflow run``, ``ironflow worker`` and ``ironflow runs …``: durable workflows from the shell.

Thin over :mod:`ironflow.engine`. ``run`` queues a run (and with ``--wait`` executes it
in this process, progress on stderr, the output as JSON on stdout); ``worker`` takes
queued runs until Ctrl-C; ``runs`` lists, shows, cancels and retries them. The store is
``--store URL``, else ``$IRONFLOW_STORE``, else a SQLite file in the user's data dir.

Exit codes: 0 done, 1 the run failed or was cancelled, 2 bad input (one line on stderr
naming the problem), 3 the store or the sandbox runtime could not be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar

import typer
import yaml
from rich.console import Console
from rich.table import Table

from ironflow import errors, labels
from ironflow.cli import options
from ironflow.cli.options import Backend
from ironflow.engine import accounts, loading, model
from ironflow.engine.runner import Runner
from ironflow.engine.store import Store, open_store
from ironflow.engine.worker import Worker
from ironflow.k8s.provider import K8sEphemeralProvider
from ironflow.kube.clusters import ClusterConfig, describe_cluster
from ironflow.provider import AgentProvider

if TYPE_CHECKING:
    from ironflow.local.provider import ProxyCredential

__all__ = ["register", "step_pod_selector"]

T = TypeVar("T")

EXIT_FAILED: Final = 1
EXIT_BAD_INPUT: Final = options.EXIT_BAD_INPUT
EXIT_INFRASTRUCTURE: Final = 3
_FAKE_REPLY: Final = "Looks good to me. (offline fake model)"

_err = Console(stderr=True, soft_wrap=True, highlight=False)


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store", help="Store URL: sqlite:///path or postgresql://… (default $IRONFLOW_STORE).", show_default=False
    ),
]
OutputOption = Annotated[Output, typer.Option("-o", "--output", help="table or json.")]
AccountOption = Annotated[
    list[str] | None,
    typer.Option(
        "--account",
        help="A Provider Account: NAME=env:VAR or NAME=secret:[NS/]SECRET/KEY[,kind=api_key]; repeatable.",
        show_default=False,
    ),
]
CapacityWaitOption = Annotated[
    float, typer.Option("--max-capacity-wait", help="Seconds a step waits for an account outside a rejected window.")
]


def _parse_accounts(specs: list[str] | None) -> list[accounts.ProviderAccount]:
    try:
        return [accounts.parse_account(s) for s in specs or ()]
    except errors.ConfigError as exc:
        _fail(exc.message)


@contextlib.asynccontextmanager
async def _pool(
    store: Store,
    parsed: list[accounts.ProviderAccount],
    max_wait_s: float,
    cluster: Callable[[], ClusterConfig | None],
) -> AsyncIterator[accounts.AccountPool | None]:
    """The accounts' pool; a Kubernetes client only if a Secret is referenced, on ``cluster()``
    (the provider file's, so Secrets are read where the pods run; None: the default kubeconfig)."""
    if not parsed:
        yield None
        return
    if not any(a.credential.secret is not None for a in parsed):
        yield accounts.AccountPool(store, parsed, max_wait_s=max_wait_s)
        return
    from ironflow.kube import api as k8s_api

    chosen = cluster()
    try:
        kube = await k8s_api.KubeApi.connect(chosen)
    except errors.IronflowError as exc:
        where = (
            "no cluster is configured" if chosen is None else f"its cluster is unusable ({describe_cluster(chosen)})"
        )
        _fail(f"an account reads a Kubernetes Secret, but {where}: {exc.message}")
    try:
        reader = accounts.KubeSecretReader(kube)
        yield accounts.AccountPool(store, parsed, max_wait_s=max_wait_s, secret_reader=reader)
    finally:
        await kube.close()


_fail = options.fail


def step_pod_selector(run_id: str, step: model.StepRecord) -> str | None:
    """The label selector of an agent step's pods (``kubectl get pods -l …``); None for other kinds."""
    if step.kind is not model.StepKind.AGENT:
        return None
    return labels.selector(
        labels.RUNNER_SELECTOR, {labels.LABEL_RUN_ID: run_id, labels.LABEL_STEP: labels.sanitize_label_value(step.name)}
    )


@contextlib.asynccontextmanager
async def _opened(url: str | None) -> AsyncIterator[Store]:
    try:
        store = open_store(url)
    except errors.ConfigError as exc:
        _fail(exc.message)
    try:
        await store.open()
    except errors.ConfigError as exc:
        _fail(exc.message)
    except errors.InfrastructureError as exc:
        _fail(exc.message, EXIT_INFRASTRUCTURE)
    try:
        yield store
    finally:
        await store.close()


def _run_async(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        _fail("interrupted", 130)


def _plain(value: Any) -> Any:
    """Stored values as plain JSON (agent results become dicts)."""
    return json.loads(model.to_json(value, what="the value"))


# --- providers ---------------------------------------------------------------------------


class _Providers:
    """One provider per backend, built on first use; the offline model server if asked."""

    def __init__(self, *, isolation: str, provider_file: Path | None, fake_model: bool) -> None:
        self.isolation = isolation
        self.provider_file = provider_file
        self.fake_model = fake_model
        self.fake_credential: ProxyCredential | None = None
        self._built: dict[str, AgentProvider] = {}
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> _Providers:
        if self.fake_model:
            from ironflow.fake_model.server import Script

            fake = options.fake_model(Script.of(default=_FAKE_REPLY))
            self.fake_credential = await self._stack.enter_async_context(fake)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def check(self, backend: str) -> None:
        """Fail now, with exit 2, when a backend cannot be built here."""
        self.get(backend)

    def get(self, backend: str | None) -> AgentProvider:
        backend = backend or Backend.LOCAL
        if backend not in self._built:
            self._built[backend] = self._build(backend)
        return self._built[backend]

    def cluster_for(self, backend: str | None) -> ClusterConfig | None:
        """The cluster the provider file names for ``backend`` (None: local, or no file).

        A worker serves every backend: with ``backend=None`` the file's own shape decides
        (an agent-sandbox file has a ``pod:`` section, a k8s file never has).
        """
        if self.provider_file is None or backend == Backend.LOCAL:
            return None
        if backend is None:
            with contextlib.suppress(OSError, yaml.YAMLError):
                data = yaml.safe_load(self.provider_file.read_text())
                backend = Backend.AGENT_SANDBOX if isinstance(data, dict) and "pod" in data else Backend.K8S
            backend = backend or Backend.K8S  # unreadable: the k8s loader names the problem
        provider = self.get(backend)
        if isinstance(provider, K8sEphemeralProvider):
            return provider.settings.cluster
        from ironflow.agent_sandbox.provider import AgentSandboxProvider

        if isinstance(provider, AgentSandboxProvider):
            return provider.cluster_config
        return None

    def _build(self, backend: str) -> AgentProvider:
        if backend == Backend.LOCAL:
            from ironflow.local.provider import LocalSandboxProvider

            return LocalSandboxProvider(
                isolation=self.isolation,  # type: ignore[arg-type]
                credential=self.fake_credential,
            )
        if backend == Backend.K8S:
            return options.k8s_provider(self.provider_file)
        if backend == Backend.AGENT_SANDBOX:
            return options.agent_sandbox_provider(self.provider_file)
        _fail(f"unknown backend {backend!r}; use local, k8s or agent-sandbox")


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
    if raw.startswith("@"):
        path = Path(raw[1:])
        if not path.is_file():
            _fail(f"--input file '{path}' not found")
        text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(f"--input is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); pass a JSON value")


def _resolve_ref(ref: str) -> str:
    """Check the workflow loads, and make a file reference absolute so any worker finds it."""
    try:
        workflow = loading.load_workflow(ref)
    except errors.ConfigError as exc:
        _fail(exc.message)
    except Exception as exc:  # the user's file raised while importing
        _fail(f"cannot load workflow {ref!r}: {type(exc).__name__}: {exc}")
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
            _err.print(f"[yellow]run requeued:[/] {current.error['message']}; trying again when due", markup=True)
        await asyncio.sleep(max(current.available_at - time.time(), 0.05))


async def _run(
    ref: str,
    input: Any,
    backend: Backend,
    store_url: str | None,
    wait: bool,
    providers: _Providers,
    lease_s: float,
    parsed_accounts: list[accounts.ProviderAccount],
    max_wait_s: float,
) -> int:
    async with (
        _opened(store_url) as store,
        providers,
        _pool(store, parsed_accounts, max_wait_s, lambda: providers.cluster_for(backend)) as pool,
    ):
        if wait:
            providers.check(backend)
        run = await store.create_run(model.RunRecord(id=model.new_id(), workflow=ref, input=input, backend=backend))
        if not wait:
            print(run.id)
            return 0
        _err.print(f"run {run.id} ({ref}) on {backend}", highlight=False)
        worker = Worker(store, lambda r: Runner(store, providers.get(r.backend), accounts=pool), lease_s=lease_s)
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
            print(json.dumps(_plain(final.output), indent=2))
            return 0
        message = final.error["message"] if final.error else final.status
        _err.print(f"[red]run {run.id} {final.status}:[/] {message}", highlight=False)
        return EXIT_FAILED


def run(
    workflow: Annotated[str, typer.Argument(help="FILE.py:function or package.module:function.", show_default=False)],
    input: Annotated[str | None, typer.Option("--input", help="The workflow's input: JSON, or @file.json.")] = None,
    backend: Annotated[Backend, typer.Option(help="Where agent steps run.")] = Backend.LOCAL,
    store: StoreOption = None,
    wait: Annotated[bool, typer.Option("--wait", help="Execute the run here and print its output.")] = False,
    fake_model: Annotated[
        bool, typer.Option("--fake-model", help="With --wait: answer agent steps from the offline model server.")
    ] = False,
    isolation: Annotated[str, typer.Option(help="Local sandbox: bwrap or gvisor.")] = "bwrap",
    provider_file: Annotated[
        Path | None, typer.Option("--provider", help="Provider settings file for --backend k8s / agent-sandbox.")
    ] = None,
    lease: Annotated[float, typer.Option(help="Lease seconds while executing.", min=1.0)] = 30.0,
    account: AccountOption = None,
    max_capacity_wait: CapacityWaitOption = 300.0,
) -> None:
    """Queue a run of WORKFLOW (a worker takes it), or execute it here with --wait."""
    if fake_model and not wait:
        _fail("--fake-model only applies with --wait (a worker has its own --fake-model)")
    value = _parse_input(input)
    ref = _resolve_ref(workflow)
    parsed = _parse_accounts(account)
    if parsed and not wait:
        _fail("--account only applies with --wait (give the worker its accounts)")
    providers = _Providers(isolation=isolation, provider_file=provider_file, fake_model=fake_model)
    raise typer.Exit(_run_async(_run(ref, value, backend, store, wait, providers, lease, parsed, max_capacity_wait)))


# --- ironflow worker ---------------------------------------------------------------------


async def _work(
    store_url: str | None,
    concurrency: int,
    lease_s: float,
    providers: _Providers,
    parsed_accounts: list[accounts.ProviderAccount],
    max_wait_s: float,
) -> int:
    async with (
        _opened(store_url) as store,
        providers,
        _pool(store, parsed_accounts, max_wait_s, lambda: providers.cluster_for(None)) as pool,
    ):
        worker = Worker(
            store,
            lambda r: Runner(store, providers.get(r.backend), accounts=pool),
            concurrency=concurrency,
            lease_s=lease_s,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        _err.print(f"worker {worker.id} taking runs (concurrency {concurrency}); Ctrl-C stops", highlight=False)
        await worker.run(stop=stop)
        return 0


def worker(
    store: StoreOption = None,
    concurrency: Annotated[int, typer.Option(help="Runs executed at once.", min=1)] = 1,
    lease: Annotated[float, typer.Option(help="Lease seconds; renewed every third.", min=1.0)] = 30.0,
    fake_model: Annotated[
        bool, typer.Option("--fake-model", help="Answer agent steps from the offline model.")
    ] = False,
    isolation: Annotated[str, typer.Option(help="Local sandbox: bwrap or gvisor.")] = "bwrap",
    provider_file: Annotated[Path | None, typer.Option("--provider", help="Provider settings file for k8s.")] = None,
    account: AccountOption = None,
    max_capacity_wait: CapacityWaitOption = 300.0,
) -> None:
    """Take queued runs from the store and execute them until Ctrl-C."""
    parsed = _parse_accounts(account)
    providers = _Providers(isolation=isolation, provider_file=provider_file, fake_model=fake_model)
    raise typer.Exit(_run_async(_work(store, concurrency, lease, providers, parsed, max_capacity_wait)))


# --- ironflow runs -----------------------------------------------------------------------

runs_app = typer.Typer(help="List, show, cancel and retry runs.", no_args_is_help=True)


def _age(ts: float) -> str:
    seconds = max(time.time() - ts, 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _run_summary(run: model.RunRecord) -> dict[str, Any]:
    return {
        "id": run.id,
        "workflow": run.workflow,
        "status": str(run.status),
        "attempt": run.attempt,
        "root_run_id": run.root_run_id,
        "parent_run_id": run.parent_run_id,
        "backend": run.backend,
        "created_at": run.created_at,
    }


async def _list(store_url: str | None, status: model.RunStatus | None, limit: int) -> list[model.RunRecord]:
    async with _opened(store_url) as store:
        return await store.list_runs(status=status, limit=limit)


@runs_app.command("list")
def runs_list(
    store: StoreOption = None,
    status: Annotated[model.RunStatus | None, typer.Option(help="Only runs in this state.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.", min=1)] = 50,
    output: OutputOption = Output.TABLE,
) -> None:
    """List runs, newest first."""
    found = _run_async(_list(store, status, limit))
    if output is Output.JSON:
        print(json.dumps([_run_summary(r) for r in found], indent=2))
        return
    table = Table("RUN", "WORKFLOW", "STATUS", "ATTEMPT", "PARENT", "AGE", box=None)
    for r in found:
        table.add_row(r.id, r.workflow.rsplit("/", 1)[-1], str(r.status), str(r.attempt), r.parent_run_id or "-",
                      _age(r.created_at))  # fmt: skip
    Console(width=200).print(table)


async def _show(store_url: str | None, run_id: str) -> tuple[model.RunRecord, list[model.StepRecord]]:
    async with _opened(store_url) as store:
        run = await store.get_run(run_id)
        if run is None:
            _fail(f"no run {run_id} in the store; list runs with `ironflow runs list`")
        return run, await store.steps(run_id)


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="The run's id.", show_default=False)],
    store: StoreOption = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Show a run: its state, its steps, their pods and their results."""
    run, steps = _run_async(_show(store, run_id))
    step_rows = [{**_plain(s.to_dict()), "pods": step_pod_selector(run.id, s)} for s in steps]
    if output is Output.JSON:
        print(json.dumps({**_plain(run.to_dict()), "steps": step_rows}, indent=2))
        return
    console = Console(width=200)
    console.print(f"run       {run.id}\nworkflow  {run.workflow}\nstatus    {run.status} (attempt {run.attempt})",
                  highlight=False)  # fmt: skip
    if run.parent_run_id:
        console.print(f"parent    {run.parent_run_id}\nroot      {run.root_run_id}", highlight=False)
    if run.error:
        console.print(f"error     {run.error['type']}: {run.error['message']}", highlight=False, markup=False)
    table = Table("#", "STEP", "KIND", "STATUS", "ATTEMPTS", "PODS / CHILD RUN", "RESULT", box=None)
    for s, row in zip(steps, step_rows, strict=True):
        result = s.result.text if hasattr(s.result, "text") else json.dumps(row["result"])
        if s.error:
            result = f"{s.error['type']}: {s.error['message']}"
        table.add_row(str(s.position), s.name, str(s.kind), str(s.status), str(s.attempts),
                      row["pods"] or s.child_run_id or "-", result[:80])  # fmt: skip
    console.print(table)
    if run.status is model.RunStatus.SUCCEEDED:
        console.print("output", json.dumps(_plain(run.output)), highlight=False, markup=False)


async def _change(store_url: str | None, run_id: str, action: str) -> model.RunRecord:
    async with _opened(store_url) as store:
        run = await store.get_run(run_id)
        if run is None:
            _fail(f"no run {run_id} in the store; list runs with `ironflow runs list`")
        if run.parent_run_id is not None:
            _fail(f"run {run_id} is a sub-workflow run; {action} its root run {run.root_run_id} instead")
        if action == "cancel":
            if run.finished:
                _fail(f"run {run_id} already {run.status}; nothing to cancel")
            changed = await store.cancel_run(run_id)
        else:
            if run.status not in (model.RunStatus.FAILED, model.RunStatus.CANCELLED):
                _fail(f"run {run_id} is {run.status}; only failed or cancelled runs can be retried")
            changed = await store.retry_run(run_id)
        assert changed is not None
        return changed


@runs_app.command("cancel")
def runs_cancel(
    run_id: Annotated[str, typer.Argument(help="The run's id.", show_default=False)],
    store: StoreOption = None,
) -> None:
    """Cancel a run: a pending one never runs; a running one's steps are stopped and the run released."""
    run = _run_async(_change(store, run_id, "cancel"))
    print(f"run {run.id} {'cancelled' if run.status is model.RunStatus.CANCELLED else 'cancel requested'}")


@runs_app.command("retry")
def runs_retry(
    run_id: Annotated[str, typer.Argument(help="The run's id.", show_default=False)],
    store: StoreOption = None,
) -> None:
    """Queue a failed or cancelled run again; its finished steps replay from the store."""
    run = _run_async(_change(store, run_id, "retry"))
    print(f"run {run.id} {run.status}")


def register(app: typer.Typer) -> None:
    """Add ``run``, ``worker`` and the ``runs`` group to the ``ironflow`` app."""
    app.command("run")(run)
    app.command("worker")(worker)
    app.add_typer(runs_app, name="runs")
