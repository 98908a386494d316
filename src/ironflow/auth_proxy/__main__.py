"""``python -m ironflow.auth_proxy``: environment → config → a running server; exit codes.

Exit 0 after a graceful shutdown (SIGINT/SIGTERM), 2 when the configuration is refused
(one line on stderr naming the variable), 1 when the registry cannot be opened.
With ``--workers N`` (N > 1) the parent starts N server processes sharing the port
through ``SO_REUSEPORT`` and forwards signals to them. They share the PostgreSQL
registry, or, without a database, the parent's in-memory registry through a private
unix socket (:mod:`ironflow.auth_proxy.hub`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence

from ironflow.auth_proxy import app, config, hub, logs, registry
from ironflow.errors import ConfigError

__all__ = ["main", "run_workers", "serve"]

EXIT_CONFIG = 2
EXIT_REGISTRY = 1


async def _flush_logs_forever(interval_s: float = 0.2) -> None:
    while True:
        await asyncio.sleep(interval_s)
        logs.flush()


async def serve(cfg: config.AuthProxyConfig, *, reuse_port: bool = False) -> None:
    """Serve until SIGINT or SIGTERM, then drain and close the registry."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with app.run_auth_proxy(cfg, host=cfg.host, port=cfg.port, reuse_port=reuse_port) as running:
            logs.event(
                "auth proxy listening",
                address=running.url,
                egress=running.egress,
                registry="postgres" if cfg.database_url is not None else "memory",
                pid=os.getpid(),
            )
            flusher = loop.create_task(_flush_logs_forever(), name="ironflow-auth-proxy-log-flush")
            try:
                await stop.wait()
            finally:
                flusher.cancel()
            logs.event("auth proxy shutting down")
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        logs.flush()


async def _supervise(workers: int, env: dict[str, str], hub_socket: str | None) -> int:
    argv = [sys.executable, "-m", "ironflow.auth_proxy", "--reuse-port"]
    async with contextlib.AsyncExitStack() as stack:
        if hub_socket is not None:
            await stack.enter_async_context(hub.serve_hub(hub_socket))
            env = {**env, config.HUB_ENV: hub_socket}
        children = [await asyncio.create_subprocess_exec(*argv, env=env) for _ in range(workers)]

        stopping = False

        def forward(signum: int) -> None:
            nonlocal stopping
            stopping = True
            for child in children:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signum)

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, forward, signum)
        waits = [asyncio.ensure_future(child.wait()) for child in children]
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if not stopping:
            # A worker died on its own: stop the others so the pod restarts whole, not at half capacity.
            logs.event("auth proxy worker exited; stopping the others", 40, code=next(iter(done)).result())
            forward(signal.SIGTERM)
        codes = await asyncio.gather(*waits)
    if stopping:
        # A worker still starting when the signal came dies of it before its handler exists: a clean stop.
        codes = [0 if code in (-signal.SIGINT, -signal.SIGTERM) else code for code in codes]
    worst = max(codes, key=abs)
    return worst if stopping or worst else 1


def run_workers(workers: int, env: Mapping[str, str] | None = None, *, shared_memory: bool = False) -> int:
    """Start ``workers`` server processes on one port; forward SIGINT/SIGTERM; the worst exit code.

    With ``shared_memory`` this process keeps the in-memory registry and serves it to the
    workers over a private unix socket (:mod:`ironflow.auth_proxy.hub`).
    """
    source = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="ironflow-auth-proxy-") as private:
        os.chmod(private, 0o700)
        hub_socket = os.path.join(private, "registry.sock") if shared_memory else None
        return asyncio.run(_supervise(workers, source, hub_socket))


def _use_uvloop() -> None:
    """uvloop when installed (about a fifth less CPU per relayed request); asyncio's loop otherwise."""
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]  # optional dependency
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Parse flags and environment, then serve; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m ironflow.auth_proxy", description=__doc__)
    parser.add_argument("--workers", type=int, default=1, help="server processes sharing the port (SO_REUSEPORT)")
    parser.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--egress-listen",
        metavar="HOST:PORT",
        help=f"serve the egress proxy there too (else {config.EGRESS_LISTEN_ENV}; unset: no egress proxy)",
    )
    args = parser.parse_args(argv)
    source = dict(os.environ if env is None else env)
    if args.egress_listen is not None:
        source[config.EGRESS_LISTEN_ENV] = args.egress_listen  # the workers read it from their environment
    try:
        cfg = config.AuthProxyConfig.from_env(source)
        if args.workers < 1:
            raise ConfigError("--workers must be at least 1")
    except ConfigError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    logs.configure(cfg.log_level, batched=True)
    for warning in cfg.warnings:
        logs.event(warning, 30)
    if args.workers > 1:
        return run_workers(args.workers, source, shared_memory=cfg.database_url is None)
    _use_uvloop()
    try:
        asyncio.run(serve(cfg, reuse_port=args.reuse_port))
    except registry.RegistryUnavailable as exc:
        print(f"error: {exc}: check {config.DATABASE_URL_ENV} and the database", file=sys.stderr)
        return EXIT_REGISTRY
    return 0


if __name__ == "__main__":
    sys.exit(main())
