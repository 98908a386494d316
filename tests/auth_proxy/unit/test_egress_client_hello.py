"""Reading the server name of a TLS ClientHello: real ones from OpenSSL, and garbage that must
only ever be refused with :class:`NotClientHello`."""

from __future__ import annotations

import contextlib
import ssl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow.auth_proxy import client_hello


def _hello(server_name: str | None, *, minimum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2) -> bytes:
    """The first flight OpenSSL sends for ``server_name`` (no socket: memory BIOs)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = minimum
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _split(hello: bytes, at: int) -> bytes:
    """The same handshake message cut over two records at payload offset ``at``."""
    version, payload = hello[1:3], hello[5:]
    first, second = payload[:at], payload[at:]
    record = b"\x16" + version
    return record + len(first).to_bytes(2, "big") + first + record + len(second).to_bytes(2, "big") + second


@pytest.mark.parametrize("name", ["pypi.org", "files.pythonhosted.org", "xn--bcher-kva.example"])
def test_the_server_name_of_a_real_client_hello_is_read(name: str) -> None:
    assert client_hello.server_name(_hello(name)) == name


def test_a_client_hello_without_a_name_reads_none() -> None:
    """OpenSSL sends no server_name for an IP address (RFC 6066 forbids literals in it)."""
    assert client_hello.server_name(_hello("127.0.0.1")) is None


def test_the_name_is_lowercased_without_its_trailing_dot() -> None:
    assert client_hello.server_name(_hello("GitHub.COM.")) == "github.com"


def test_bytes_needed_asks_for_the_record_header_then_the_rest() -> None:
    hello = _hello("pypi.org")
    assert client_hello.bytes_needed(b"") == 5
    assert client_hello.bytes_needed(hello[:3]) == 2
    assert client_hello.bytes_needed(hello[:5]) == len(hello) - 5
    assert client_hello.bytes_needed(hello) == 0


def test_a_client_hello_split_over_two_records_is_read_whole() -> None:
    split = _split(_hello("registry.npmjs.org"), 100)
    first_record = 5 + 100
    assert client_hello.bytes_needed(split[:first_record]) == 5  # the next record's header
    assert client_hello.server_name(split) == "registry.npmjs.org"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", "not a TLS handshake record"),
        (b"\x16\x03\x01\x00\x00", "bad TLS record length"),
        (b"\x16\x03\x01\x00\x04\x02\x00\x00\x00", "not a ClientHello"),
        (b"\x16\x03\x01\xff\xff", "bad TLS record length"),
        (b"\x17\x03\x03\x00\x10" + b"\x00" * 16, "not a TLS handshake record"),
    ],
)
def test_what_is_not_a_client_hello_is_refused_with_its_reason(data: bytes, reason: str) -> None:
    with pytest.raises(client_hello.NotClientHello, match=reason):
        client_hello.server_name(data)


def test_a_client_hello_larger_than_the_cap_is_refused() -> None:
    many = b"".join(b"\x16\x03\x01\x40\x00" + b"\x01" + b"\x00" * (0x4000 - 1) for _ in range(5))
    with pytest.raises(client_hello.NotClientHello, match="too large"):
        client_hello.bytes_needed(many)


def test_a_client_hello_naming_two_hosts_is_refused() -> None:
    hello = _hello("aaaa.example")
    name = b"\x00\x00\x0caaaa.example"
    at = hello.index(name)
    doubled_list = name + b"\x00\x00\x0cbbbb.example"
    # server_name extension: type(2) len(2) list_len(2) entries; patch the three lengths.
    ext_start = at - 2 - 2 - 2
    extension = b"\x00\x00" + (len(doubled_list) + 2).to_bytes(2, "big") + len(doubled_list).to_bytes(2, "big")
    rebuilt = hello[:ext_start] + extension + doubled_list + hello[at + len(name) :]
    grow = len(rebuilt) - len(hello)
    payload = bytearray(rebuilt[5:])
    payload[1:4] = (int.from_bytes(payload[1:4], "big") + grow).to_bytes(3, "big")
    exts_at = 4 + 2 + 32
    exts_at += 1 + payload[exts_at]
    exts_at += 2 + int.from_bytes(payload[exts_at : exts_at + 2], "big")
    exts_at += 1 + payload[exts_at]
    payload[exts_at : exts_at + 2] = (int.from_bytes(payload[exts_at : exts_at + 2], "big") + grow).to_bytes(2, "big")
    forged = rebuilt[:3] + len(payload).to_bytes(2, "big") + bytes(payload)
    with pytest.raises(client_hello.NotClientHello, match="exactly one host"):
        client_hello.server_name(forged)


@given(st.binary(max_size=2048))
def test_garbage_is_only_ever_refused(data: bytes) -> None:
    with contextlib.suppress(client_hello.NotClientHello):
        client_hello.server_name(data)


_REAL = _hello("pypi.org")


def _mutated(flips: list[tuple[int, int]]) -> bytes:
    """The real ClientHello with the byte at each ``at`` set to its ``value``."""
    data = bytearray(_REAL)
    for at, value in flips:
        data[at] = value
    return bytes(data)


@given(st.lists(st.tuples(st.integers(0, len(_REAL) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_a_mutated_client_hello_reads_a_name_or_is_refused(flips: list[tuple[int, int]]) -> None:
    try:
        name = client_hello.server_name(_mutated(flips))
    except client_hello.NotClientHello:
        return
    assert name is None or (name == name.lower() and name.isascii())


@given(st.integers(1, len(_REAL)))
def test_every_prefix_of_a_client_hello_asks_for_more(cut: int) -> None:
    prefix = _REAL[: len(_REAL) - cut]
    assert client_hello.bytes_needed(prefix) > 0
    with pytest.raises(client_hello.NotClientHello):
        client_hello.server_name(prefix)


def test_hello_length_takes_the_client_hello_and_leaves_what_follows() -> None:
    early_data = b"\x17\x03\x03\x00\x05hello"
    assert client_hello.hello_length(_REAL) == len(_REAL)
    assert client_hello.hello_length(_REAL + early_data) == len(_REAL)
    split = _split(_REAL, 100)
    assert client_hello.hello_length(split + early_data) == len(split)
    assert client_hello.hello_length(split[:200]) is None
    with pytest.raises(client_hello.NotClientHello):
        client_hello.hello_length(b"GET / HTTP/1.1\r\n\r\n")


@given(st.integers(0, len(_REAL) - 1))
def test_hello_length_waits_for_every_prefix(cut: int) -> None:
    assert client_hello.hello_length(_REAL[:cut]) is None


@pytest.mark.parametrize("follows", [b"", b"\x17\x03\x03\x00\x05hello"])
@pytest.mark.parametrize("hello", [_REAL, _split(_REAL, 100), _hello("127.0.0.1")], ids=["one", "split", "no-name"])
def test_read_is_hello_length_and_server_name_in_one_pass(hello: bytes, follows: bytes) -> None:
    data = hello + follows
    taken = client_hello.hello_length(data)
    assert taken is not None
    assert client_hello.read(data) == (taken, client_hello.server_name(data[:taken]))
    assert client_hello.read(data[: len(hello) - 1]) is None


def _taken_and_name(data: bytes) -> object:
    """What :func:`client_hello.read` must answer: hello_length, then server_name of those bytes."""
    try:
        taken = client_hello.hello_length(data)
        return None if taken is None else (taken, client_hello.server_name(data[:taken]))
    except client_hello.NotClientHello:
        return client_hello.NotClientHello


@given(st.lists(st.tuples(st.integers(0, len(_REAL) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_read_answers_what_hello_length_and_server_name_answer(flips: list[tuple[int, int]]) -> None:
    data = _mutated(flips)
    try:
        found: object = client_hello.read(data)
    except client_hello.NotClientHello:
        found = client_hello.NotClientHello
    assert found == _taken_and_name(data)
