"""Ports for the servers tests start: never from the kernel's ephemeral range, never repeated."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ironflow.testing import ports


def _ephemeral() -> tuple[int, int]:
    low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    return low, high


def test_a_port_is_below_the_ephemeral_range_and_can_be_bound() -> None:
    low, _ = _ephemeral()
    port = ports.free_port()
    assert 10_000 <= port < low
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))


def test_a_process_is_never_given_the_same_port_twice() -> None:
    given = [ports.free_port() for _ in range(300)]
    assert len(set(given)) == len(given)


class _Scripted:
    """Draws the given ports in order (the real draw is random)."""

    def __init__(self, *draws: int) -> None:
        self._draws = iter(draws)

    def randrange(self, start: int, stop: int) -> int:
        return next(self._draws)


def _listening_below(top: int) -> socket.socket:
    for port in range(top - 1, 10_000, -1):
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        sock.listen()
        return sock
    raise AssertionError("no port to listen on")


def test_a_port_someone_listens_on_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    low, _ = _ephemeral()
    with _listening_below(low) as taken, _listening_below(low - 100) as other:
        busy, also_busy = taken.getsockname()[1], other.getsockname()[1]
        other.close()  # free again: the next draw
        monkeypatch.setattr(ports, "_given", set())  # ports the tests before drew may include also_busy
        monkeypatch.setattr(ports, "_draw", _Scripted(busy, busy, also_busy))
        assert ports.free_port() == also_busy
