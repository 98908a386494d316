"""The egress proxy's SSRF guard against real DNS: run by ``test_egress_real_dns.py`` only.

Not collected on its own (its name is no ``test_*``): each case runs inside a network and mount
namespace of its own (``unshare --net --mount``), where ``/etc/resolv.conf`` names a
:class:`~tests.fakes.dns_server.ScriptedDns` on ``127.0.0.1:53`` and loopback is the only
network. So the proxy resolves through glibc's ``getaddrinfo`` and a hostile server on the wire,
not through a resolver handed to it in Python.
"""

from __future__ import annotations

import os

import pytest
from tests.auth_proxy.integration.test_egress_proxy import _auth, _origin, _proxy, _raw, _token, _twin_origins
from tests.fakes.dns_server import ScriptedDns

pytestmark = pytest.mark.skipif(
    os.environ.get("IRONFLOW_IN_DNS_NETNS") != "1", reason="run inside its namespace by test_egress_real_dns.py"
)


async def test_a_name_rebound_to_loopback_after_its_check_is_refused_on_the_next_lookup() -> None:
    async with _twin_origins() as (allowed, target):
        with ScriptedDns({"rebind.example": [["127.0.0.2"], ["127.0.0.1"]]}) as dns:
            async with _proxy() as (proxy, admin):  # the system's resolver
                token = await _token(admin, f"rebind.example:{allowed.port}@127.0.0.2/32")
                head = f"GET http://rebind.example:{allowed.port}/ HTTP/1.1\r\n{_auth(token)}\r\n"
                first = await _raw(proxy, head)
                second = await _raw(proxy, head)
    assert first.endswith(b"hello"), first
    assert second.startswith(b"HTTP/1.1 403 "), second
    assert b"resolved to 127.0.0.1" in second
    assert (allowed.connections, target.connections) == (1, 0)
    assert dns.queries_of("rebind.example") == ["rebind.example"] * 2  # one lookup a request, each checked


@pytest.mark.parametrize("address", ["169.254.169.254", "127.0.0.1", "10.0.0.1"])
async def test_a_name_answering_a_private_address_is_refused_under_allow_all(address: str) -> None:
    async with _origin() as origin:
        with ScriptedDns({"metadata.example": [[address]]}):
            async with _proxy() as (proxy, admin):
                token = await _token(admin, "*:*")
                answer = await _raw(proxy, f"GET http://metadata.example:{origin.port}/ HTTP/1.1\r\n{_auth(token)}\r\n")
    assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert f"resolved to {address}".encode() in answer
    assert origin.connections == 0


async def test_a_name_answering_a_public_and_a_private_address_is_refused() -> None:
    async with _twin_origins() as (allowed, target):
        with ScriptedDns({"split.example": [["127.0.0.2", "127.0.0.1"]]}):
            async with _proxy() as (proxy, admin):
                token = await _token(admin, f"split.example:{allowed.port}@127.0.0.2/32")
                answer = await _raw(proxy, f"CONNECT split.example:{allowed.port} HTTP/1.1\r\n{_auth(token)}\r\n")
    assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert (allowed.connections, target.connections) == (0, 0)
