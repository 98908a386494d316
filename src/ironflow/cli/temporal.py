"""``ironflow temporal-worker``: a Temporal worker running ironflow steps on one provider.

It polls one task queue of a Temporal server for the workflows of ``--workflows FILE`` and for
the ironflow activities (agent step, command, release), which run on the ``--backend``'s
provider (``--provider FILE`` for k8s / agent-sandbox, the local sandbox otherwise). Ctrl-C or
SIGTERM stops it: in-flight activities are cancelled, so their sandboxes are removed. With
``--account``, agent steps take Provider Accounts whose rate-limit windows live in ``--store``
(PostgreSQL to share them across workers); a step every account rejects waits on the
workflow's timer. With ``--session-pool N`` (local), session steps take sandboxes kept warm. With
``--sealing-key FILE``, payloads holding a secret untrusted block are sealed under that key
(:mod:`ironflow.temporal.sealing`); clients use the same key. Bad
input exits 2 with one line; a server that cannot be reached exits 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from ironflow import errors
from ironflow.cli import backends, exits, shared_options, stores
from ironflow.cli import run as run_cli
from ironflow.cli.backends import Backend, Isolation
from ironflow.cli.stores import run_async
from ironflow.engine.accounts import ProviderAccount
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION, NO_PROXY_FOR_ACCOUNTS
from ironflow.secrets import Secret
from ironflow.sessions.pools import PoolPolicy

__all__ = ["register", "temporal_worker"]

_log = logging.getLogger("ironflow.temporal")


def _address(raw: str) -> str:
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        exits.fail(f"--address must be HOST:PORT (e.g. 127.0.0.1:7233), got {raw!r}")
    return raw


async def _serve(
    address: str,
    namespace: str,
    task_queue: str,
    workflow_files: list[Path],
    providers: backends.Providers,
    backend: Backend,
    concurrency: int,
    store_url: str | None,
    parsed: list[ProviderAccount],
    sealing_key: Secret | None,
    session_pool: int = 0,
) -> int:
    from ironflow.temporal import activities as temporal_activities  # the optional extra, loaded here only
    from ironflow.temporal import sealing
    from ironflow.temporal import worker as temporal_worker_mod

    try:
        workflows = [w for f in workflow_files for w in temporal_worker_mod.load_workflows(str(f))]
    except errors.ConfigError as exc:
        exits.fail(exc.message)
    try:
        converter = sealing.data_converter(sealing_key) if sealing_key is not None else None
    except errors.ConfigError as exc:
        exits.fail(f"--sealing-key: {exc.message}")
    async with providers:
        provider = providers.get(backend)  # bad provider input exits 2 before anything connects
        if parsed and provider.account_kind() != ACCOUNT_KIND_CLAUDE_SUBSCRIPTION:
            exits.fail(f"--account on --backend {backend}: {NO_PROXY_FOR_ACCOUNTS}")
        client = await temporal_worker_mod.connect(
            address, namespace=namespace, data_converter=converter
        )  # exit 3 if unreachable
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
        async with contextlib.AsyncExitStack() as stack:
            pool = None
            if parsed:  # windows shared through the store; a rejected step waits on the workflow's timer
                store = await stack.enter_async_context(stores.opened(store_url))
                cluster = functools.partial(providers.cluster_for, backend)
                pool = await stack.enter_async_context(run_cli.account_pool(store, parsed, 0.0, cluster))
            await stack.enter_async_context(provider)
            sessions = None
            if session_pool:  # closed before the provider: every warm sandbox torn down
                sessions = backends.pooled_sessions(provider, PoolPolicy(session_pool))
                stack.push_async_callback(sessions.aclose)
            running = temporal_worker_mod.build_worker(
                client,
                task_queue=task_queue,
                provider=provider,
                workflows=workflows,
                activities=temporal_activities.IronflowActivities(provider, accounts=pool, sessions=sessions),
                max_concurrent_activities=concurrency,
            )
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            names = ", ".join(w.__name__ for w in workflows) or "none"
            typer.echo(
                f"temporal worker on {address} ({namespace}), task queue {task_queue}: workflows {names}; "
                f"steps run in {backends.where(provider)}",
                err=True,
            )
            async with running:
                await stop.wait()
    return 0


def temporal_worker(
    task_queue: Annotated[str, typer.Option("--task-queue", help="The task queue to poll.")],
    address: Annotated[str, typer.Option("--address", envvar="TEMPORAL_ADDRESS", help="Temporal server HOST:PORT.")] = (
        "127.0.0.1:7233"
    ),
    namespace: Annotated[str, typer.Option("--namespace", help="Temporal namespace.")] = "default",
    workflows: Annotated[
        list[Path] | None,
        typer.Option("--workflows", help="A file of @workflow.defn classes (repeatable); none: activities only."),
    ] = None,
    backend: Annotated[Backend, typer.Option(help="Where agent steps run.")] = Backend.LOCAL,
    provider_file: Annotated[
        Path | None, typer.Option("--provider", help="Provider settings file for --backend k8s / agent-sandbox.")
    ] = None,
    isolation: Annotated[Isolation, typer.Option(help="Local sandbox: bwrap, gvisor (runsc) or docker.")] = (
        Isolation.BWRAP
    ),
    concurrency: Annotated[int, typer.Option(help="Activities run at once.", min=1)] = 4,
    fake_model: Annotated[
        bool,
        typer.Option("--fake-model", help="Answer agent steps from the offline model; --fake-model=FILE scripts it."),
    ] = False,
    fake_model_script: Annotated[Path | None, typer.Option("--fake-model-script", hidden=True)] = None,
    store: shared_options.StoreOption = None,
    account: run_cli.AccountOption = None,
    sealing_key_file: Annotated[
        Path | None,
        typer.Option(
            "--sealing-key",
            help="A file holding the key that seals secret untrusted blocks in the history; "
            "the clients use the same key.",
        ),
    ] = None,
    session_pool: Annotated[
        int,
        typer.Option(
            "--session-pool",
            help="Local: sandboxes kept warm for the session steps (see docs/sandbox-sessions.md).",
            min=0,
        ),
    ] = 0,
) -> None:
    """Run ironflow steps (and the workflows of --workflows) for a Temporal task queue until Ctrl-C."""
    if not task_queue.strip():
        exits.fail("--task-queue must name a task queue")
    target = _address(address)
    for path in workflows or []:
        if not path.is_file():
            exits.fail(f"workflow file '{path}' not found")
    if provider_file is not None and not provider_file.is_file():
        exits.fail(f"provider file '{provider_file}' not found")
    if session_pool and backend is not Backend.LOCAL:
        exits.fail(f"--session-pool is for --backend local: a {backend} session's warm pool is the cluster's")
    if importlib.util.find_spec("temporalio") is None:
        exits.fail("ironflow temporal-worker needs the temporal extra: pip install 'ironflow-sandbox[temporal]'")
    parsed = run_cli.parse_accounts(account)
    sealing_key = _sealing_key(sealing_key_file) if sealing_key_file is not None else None
    fake = backends.fake_script(fake_model, fake_model_script, backends.BUILTIN_RUN_REPLY)
    providers = backends.Providers(isolation=isolation, provider_file=provider_file, fake=fake)
    try:
        code = run_async(
            _serve(
                target,
                namespace,
                task_queue,
                list(workflows or []),
                providers,
                backend,
                concurrency,
                store,
                parsed,
                sealing_key,
                session_pool,
            )
        )
    except typer.Exit as exc:
        code = exc.exit_code
    except SystemExit as exc:  # an error's line is out (exits.fail): leave the same way, not by the teardown
        code = exc.code if isinstance(exc.code, int) else 1
    _leave(code)


def _sealing_key(path: Path) -> Secret:
    """The sealing key from its file (the key itself is never echoed)."""
    try:
        return Secret(path.read_text().strip())
    except (OSError, UnicodeDecodeError) as exc:
        exits.fail(f"--sealing-key: cannot read '{path}': {getattr(exc, 'strerror', None) or type(exc).__name__}")


def _leave(code: int) -> NoReturn:
    """Exit without the interpreter's teardown, once everything is closed: the SDK's core threads
    may still call into Python while it finalizes and abort it (temporalio/sdk-python#300, seen
    here after a refused connection, 4 exits in 12), which would turn exit 0, 2 or 3 into 134."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def register(app: typer.Typer) -> None:
    """Add ``temporal-worker`` to the ``ironflow`` app."""
    app.command("temporal-worker", cls=shared_options.FakeModelCommand)(temporal_worker)
