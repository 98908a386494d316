"""The Docker sandbox's in-container relay (``forwarder.js``, run by Node.js) on this host's loopback: it
listens before the command starts, relays both ways with half-closes, and exits as the command did."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ironflow.local.sandbox import forwarder
from ironflow.testing.ports import free_port

SCRIPT = os.path.join(os.path.dirname(forwarder.__file__), "forwarder.js")
pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js not installed")

#: Connects to the relay, sends a line, half-closes, prints what comes back.
CLIENT = (
    "import socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
    "s.sendall(b'ping'); s.shutdown(socket.SHUT_WR)\n"
    "print(b''.join(iter(lambda: s.recv(4096), b'')).decode())\n"
)


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[str]:
    """A unix socket server that answers each connection with what it read, after the client's half-close."""
    path = str(tmp_path / "proxy.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = bytearray()
                while chunk := conn.recv(4096):  # until the relayed half-close
                    data += chunk
                conn.sendall(b"pong:" + data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path
    server.shutdown(socket.SHUT_RDWR)
    server.close()
    thread.join(5)


def _relay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["node", SCRIPT, *args], capture_output=True, text=True, timeout=30, check=False)


def test_the_port_is_relayed_both_ways_before_the_command_runs(upstream: str) -> None:
    port = free_port()
    done = _relay(str(port), upstream, "--", sys.executable, "-c", CLIENT, str(port))
    assert (done.returncode, done.stdout, done.stderr) == (0, "pong:ping\n", "")


def test_the_command_exit_code_and_a_missing_command_come_back(upstream: str) -> None:
    assert _relay(str(free_port()), upstream, "--", "sh", "-c", "exit 7").returncode == 7
    missing = _relay(str(free_port()), upstream, "--", "no-such-command-here")
    assert missing.returncode == 127
    assert missing.stderr == "forwarder.js: no-such-command-here: command not found\n"


@pytest.mark.parametrize(
    "args", [[], ["18080", "/s"], ["x", "/s", "--", "true"], ["1", "/s", "2", "/t", "3", "/u", "--", "true"]]
)
def test_bad_arguments_are_refused_with_the_usage_line(args: list[str]) -> None:
    done = _relay(*args)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: forwarder.js PORT SOCKET")
