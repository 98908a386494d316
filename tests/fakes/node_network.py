"""The test's own thread inside the real node's network namespace, where pod IPs answer (as a worker
pod's would): ``with inside_node_network(real_node): ...``.

Only the calling thread moves (``setns(2)`` with ``CLONE_NEWNET``; Python 3.11 has no ``os.setns``,
hence libc through ctypes), and only for the block: sockets it opens there (aiohttp's, the API
client's new connections, which reach the API server on the same loopback port inside) live in the
node's namespace, sockets opened before keep the host's. Nothing leaves the machine: the node's
namespace has no route out. Needs root, as the real node does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from typing import Final

from ironflow.testing.realnode import RealNodeEnv

__all__ = ["inside_node_network"]

_CLONE_NEWNET: Final = 0x40000000


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def inside_node_network(env: RealNodeEnv) -> Iterator[None]:
    """This thread in the node's network namespace until the block ends, then back in its own."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        node = os.open(f"/proc/{env.holder_pid}/ns/net", os.O_RDONLY)
        try:
            _setns(node)
        finally:
            os.close(node)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
