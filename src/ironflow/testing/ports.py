"""Loopback ports for the servers tests and benchmarks start, and for addresses nobody serves.

A port from ``bind(("127.0.0.1", 0))`` is an ephemeral port: once the probe closes it, any
outgoing connection of any process on the machine may be given it before the server we start
binds it (a clean-clone CI lost a kube-apiserver that way: "bind: address already in use").
The ports here come from below the kernel's ephemeral range, which it never hands out on its
own, so only another explicit bind can take one; they are drawn at random (from the OS, not a
seedable generator) so two processes do not walk the same sequence.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path
from typing import Final

__all__ = ["free_port"]

_EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Lowest port handed out: above the well-known and registered ports local services listen on.
_LOWEST: Final = 10_000
#: Used when the ephemeral range cannot be read (Linux's default start).
_DEFAULT_EPHEMERAL_START: Final = 32_768
_ATTEMPTS: Final = 200

_draw = random.SystemRandom()
_given: set[int] = set()
_lock = threading.Lock()


def _ephemeral_start() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_START


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback TCP port nothing listens on now and the kernel will not hand to a client; never
    the same one twice in a process."""
    top = _ephemeral_start()
    if top - _LOWEST < 1_000:  # an unusual range: fall back to the kernel's choice
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])
    with _lock:
        for _ in range(_ATTEMPTS):
            port = _draw.randrange(_LOWEST, top)
            if port not in _given and _bindable(port):
                _given.add(port)
                return port
    raise OSError(f"no free loopback port in {_LOWEST}-{top - 1} after {_ATTEMPTS} tries")
