"""A real TLS first flight, for tests and benchmarks of what reads ClientHellos (the egress proxy).

OpenSSL writes it into a memory BIO: no socket, no server; the handshake stops at the ClientHello.
"""

from __future__ import annotations

import contextlib
import ssl

__all__ = ["client_hello"]


def client_hello(server_name: str | None = None) -> bytes:
    """The ClientHello records Python's default TLS client sends (``server_name``: its SNI, none if None)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()
