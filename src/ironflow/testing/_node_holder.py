"""The real node's namespace holder: run by ``unshare --net --mount`` as the first process inside.

It makes the namespaces ready for the node (loopback up, the node's address on a veth, forwarding
and bridge netfilter on, a private ``/run`` and ``/var/log``, containerd's store in memory,
kubelet's kernel defaults as files bound over ``/proc/sys`` entries, so kubelet finds them and the
host's values never change), then
holds them: every other component joins with ``nsenter``. It also carries the one way in from the
host: a listening socket made on the host's loopback before ``unshare`` (so it stays in the host's
network namespace) whose connections it forwards to the API server on the same port inside.

Standard library only: it runs as ``python -m`` before anything else of the node exists.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from ironflow.testing import _node_config as config

__all__ = ["main", "prepare"]

_VETH, _PEER = "ifn0", "ifn1"


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)


def _write(path: str, value: str) -> None:
    with contextlib.suppress(FileNotFoundError), open(path, "w") as f:
        f.write(value)


def prepare(root: Path) -> None:
    """Network and mounts of the node's namespaces (only ever run inside them)."""
    _run("ip", "link", "set", "lo", "up")
    _run("ip", "link", "add", _VETH, "type", "veth", "peer", "name", _PEER)
    _run("ip", "addr", "add", f"{config.NODE_IP}/24", "dev", _VETH)
    _run("ip", "link", "set", _VETH, "up")
    _run("ip", "link", "set", _PEER, "up")
    _run("ip", "route", "add", "default", "dev", _VETH)
    _write("/proc/sys/net/ipv4/ip_forward", "1")  # per network namespace
    _write("/proc/sys/net/bridge/bridge-nf-call-iptables", "1")  # per network namespace here
    _run("mount", "--make-rprivate", "/")
    for target in ("/run", "/var/log"):
        _run("mount", "-t", "tmpfs", "-o", "mode=755,size=256m", "tmpfs", target)
    # containerd's images and snapshots: gone with the namespace, not left for a slow rmtree
    # (the runner image unpacks to tens of thousands of files), and faster to unpack into.
    store = root / "node" / "containerd"
    store.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", "mode=700", "tmpfs", str(store))
    values = root / "node" / "sysctl"
    values.mkdir(parents=True, exist_ok=True)
    for name, value in config.sysctl_values().items():
        src = values / name.replace("/", ".")
        src.write_text(value + "\n")
        _run("mount", "--bind", str(src), f"/proc/sys/{name}")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _forward(listener: socket.socket, port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, sock=listener)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="node-holder")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.listen_fd)
    prepare(args.root)
    ready = args.root / "node" / "holder.ready"
    ready.with_suffix(".tmp").write_text(f"{os.getpid()}\n")
    ready.with_suffix(".tmp").replace(ready)  # whole, never half written
    print("node namespaces ready", flush=True)
    asyncio.run(_forward(listener, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
