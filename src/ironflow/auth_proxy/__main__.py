"""``python -m ironflow.auth_proxy``: environment → config → a running server; exit codes.

Exit 0 after a graceful shutdown (SIGINT/SIGTERM), 2 when the configuration is refused
(one line on stderr naming the variable), 1 when the registry cannot be opened.
With ``--workers N`` (N > 1) the parent starts N server processes sharing the port
through ``SO_REUSEPORT`` and forwards signals to them; that needs the PostgreSQL
registry, since an in-memory registry lives in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

from ironflow.auth_proxy import app, config, logs, registry
from ironflow.errors import ConfigError

__all__ = ["main", "run_workers", "serve"]

EXIT_CONFIG = 2
EXIT_REGISTRY = 1


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
                registry="postgres" if cfg.database_url is not None else "memory",
                pid=os.getpid(),
            )
            await stop.wait()
            logs.event("auth proxy shutting down")
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def run_workers(workers: int, env: Mapping[str, str] | None = None) -> int:
    """Start ``workers`` server processes on one port; forward SIGINT/SIGTERM; the worst exit code."""
    argv = [sys.executable, "-m", "ironflow.auth_proxy", "--reuse-port"]
    children = [subprocess.Popen(argv, env=dict(os.environ if env is None else env)) for _ in range(workers)]

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    codes = [child.wait() for child in children]
    return max(codes, key=abs)


def _use_uvloop() -> None:
    """uvloop when installed (about a third less CPU per relayed request); asyncio's loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Parse flags and environment, then serve; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m ironflow.auth_proxy", description=__doc__)
    parser.add_argument("--workers", type=int, default=1, help="server processes sharing the port (SO_REUSEPORT)")
    parser.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    source = os.environ if env is None else env
    try:
        cfg = config.AuthProxyConfig.from_env(source)
        if args.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if args.workers > 1 and cfg.database_url is None:
            raise ConfigError(
                f"--workers {args.workers} needs {config.DATABASE_URL_ENV}: the in-memory registry lives in one process"
            )
    except ConfigError as exc:
        print(f"ironflow auth-proxy: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    logs.configure(cfg.log_level)
    for warning in cfg.warnings:
        logs.event(warning, 30)
    if args.workers > 1:
        return run_workers(args.workers, source)
    _use_uvloop()
    try:
        asyncio.run(serve(cfg, reuse_port=args.reuse_port))
    except registry.RegistryUnavailable as exc:
        print(f"ironflow auth-proxy: {exc}: check {config.DATABASE_URL_ENV} and the database", file=sys.stderr)
        return EXIT_REGISTRY
    return 0


if __name__ == "__main__":
    sys.exit(main())
