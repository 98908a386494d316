"""A test CA with a server certificate, and a loopback TLS origin answering ``hello``: what the
egress tests fetch through the proxy, from the host or from inside a sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.loopback import serving

from ironflow.testing import _kubeenv_pki as pki

__all__ = ["HELLO", "OriginTls", "hello_origin", "make_tls"]

HELLO = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"


@dataclass(frozen=True)
class OriginTls:
    """A test CA (``ca_dir/ca.pem``, readable by a sandbox's uid; ``ca_pem`` its bytes) and a server
    context whose certificate it signed (for localhost, 127.0.0.1 and the extra addresses and names
    asked for)."""

    ca_dir: Path
    ca_pem: bytes
    server: ssl.SSLContext

    def client(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def make_tls(root: Path, *, extra_ips: tuple[str, ...] = (), extra_dns: tuple[str, ...] = ()) -> OriginTls:
    """A fresh test PKI under ``root`` (``cert.pem`` and ``key.pem`` the server's pair)."""
    keys = pki.new_pki(extra_ips=extra_ips, extra_dns=extra_dns)
    ca_dir = root / "ca"
    ca_dir.mkdir(parents=True)
    (ca_dir / "ca.pem").write_bytes(keys.ca.cert_pem)
    (root / "cert.pem").write_bytes(keys.admin.cert_pem)
    (root / "key.pem").write_bytes(keys.admin.key_pem)
    ca_dir.chmod(0o755)  # a sandbox's uid reads it through a bind
    (ca_dir / "ca.pem").chmod(0o644)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(root / "cert.pem", root / "key.pem")
    return OriginTls(ca_dir, keys.ca.cert_pem, server)


@contextlib.asynccontextmanager
async def hello_origin(host: str, tls: ssl.SSLContext) -> AsyncIterator[int]:
    """A TLS server on ``host`` answering :data:`HELLO` to each request head; its port."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HELLO)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async with serving(serve, host, tls=tls) as port:
        yield port
