"""A stream cut mid-body over TLS leaves no socket behind when the event loop ends.

The server here answers one watch event and then never reads again, so a client's graceful
TLS close (close_notify, then waiting for the server's) can never finish: the socket of a
stream the client left must be aborted, or it outlives the loop and the collector finds it
open in some later test (the real-apiserver tier's intermittent "unclosed transport").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fakes.unclosed import unclosed_after_collect

from ironflow.kube import api as k8s
from ironflow.kube import reading
from ironflow.testing import _kubeenv_pki as pki

EVENT = {"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "2"}}}


class StallingTlsServer:
    """Answers each request's head with a chunked stream of one watch event, then goes silent."""

    def __init__(self, tmp: Path, pair: pki.CertPair) -> None:
        (tmp / "cert.pem").write_bytes(pair.cert_pem)
        (tmp / "key.pem").write_bytes(pair.key_pem)
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._stop = threading.Event()
        self.port = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                raw, _ = self._listener.accept()
            except TimeoutError:
                continue
            with contextlib.suppress(OSError):
                raw.settimeout(5)
                conn = self._tls.wrap_socket(raw, server_side=True)
                self._held.append(conn)
                self._answer(conn)

    @staticmethod
    def _answer(conn: ssl.SSLSocket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(4096)
        line = json.dumps(EVENT).encode() + b"\n"
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            + f"{len(line):x}\r\n".encode()
            + line
            + b"\r\n"
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[StallingTlsServer, k8s.KubeconfigInline]]:
    keys = pki.new_pki()
    stalling = StallingTlsServer(tmp_path, keys.admin)
    url = f"https://127.0.0.1:{stalling.port}"
    try:
        yield stalling, k8s.KubeconfigInline(pki.kubeconfig_yaml(url, keys.ca.cert_pem, user="u", token="t"))
    finally:
        stalling.close()


async def _watch_one_event_and_close(cluster: k8s.KubeconfigInline) -> str:
    api = await k8s.KubeApi.connect(cluster)
    try:
        stream = api.watch_stream(k8s.PODS, "ns", resource_version="1")
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                return str(event.object["metadata"]["name"])
        return ""
    finally:
        await api.close()


def test_a_watch_left_mid_stream_leaves_no_socket_when_the_loop_ends(
    server: tuple[StallingTlsServer, k8s.KubeconfigInline],
) -> None:
    assert asyncio.run(_watch_one_event_and_close(server[1])) == "p"
    assert unclosed_after_collect() == []


def test_a_graceful_close_of_that_stream_would_leave_the_socket_open(
    server: tuple[StallingTlsServer, k8s.KubeconfigInline], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: releasing the cut stream to a graceful TLS close is what leaked."""
    monkeypatch.setattr(reading, "release_stream", lambda resp: resp.release())
    assert asyncio.run(_watch_one_event_and_close(server[1])) == "p"
    assert any("unclosed" in found for found in unclosed_after_collect())
