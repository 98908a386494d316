"""IP literals read as the kernel reads them (``socket.inet_aton`` is the oracle), and the fixed deny set."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow.egress import addresses


def _kernel(host: str) -> ipaddress.IPv4Address | None:
    """What glibc's inet_aton (under getaddrinfo) makes of ``host``."""
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0X7F.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0x7f.0.0.0x1", "127.0.0.1"),
        ("169.254.169.254", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),  # the metadata address in decimal
        ("0xa9fea9fe", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("169.16689662", "169.254.169.254"),
        ("0", "0.0.0.0"),
        ("10.1", "10.0.0.1"),
    ],
)
def test_ipv4_spellings_read_as_inet_aton_does(host: str, expected: str) -> None:
    assert addresses.parse_ip_literal(host) == ipaddress.IPv4Address(expected)
    assert _kernel(host) == ipaddress.IPv4Address(expected)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("[::ffff:127.0.0.1]", "127.0.0.1"),
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("::ffff:7f00:1", "127.0.0.1"),
        ("[::ffff:a9fe:a9fe]", "169.254.169.254"),
        ("::127.0.0.1", "127.0.0.1"),  # IPv4-compatible
        ("[::1]", "::1"),
        ("::", "::"),
        ("fe80::1%eth0", "fe80::1"),
        ("2606:4700::1111", "2606:4700::1111"),
    ],
)
def test_ipv6_with_or_without_brackets_and_mapped_forms_as_ipv4(host: str, expected: str) -> None:
    assert addresses.parse_ip_literal(host) == ipaddress.ip_address(expected)


@pytest.mark.parametrize(
    "host",
    ["github.com", "localhost", "deadbeef", "0x7f.example", "a.b.c.d", "127.0.0.1.nip.io", "[github.com]", "1:2", ""],
)
def test_names_are_not_addresses(host: str) -> None:
    assert addresses.parse_ip_literal(host) is None


@pytest.mark.parametrize("host", ["1.2.3.999", "256.1.1.1", "1.2.3.4.5", "0x", "08.1", "4294967296", "a.0x1f"])
def test_numeric_non_addresses_are_neither_address_nor_name(host: str) -> None:
    assert addresses.parse_ip_literal(host) is None
    assert addresses.ends_in_number(host)


def test_a_trailing_dot_still_reads_as_the_address() -> None:
    """inet_aton refuses '127.0.0.1.', but a resolver may still answer loopback for it: read it as the address."""
    assert addresses.parse_ip_literal("127.0.0.1.") == ipaddress.IPv4Address("127.0.0.1")
    assert addresses.parse_ip_literal("2130706433.") == ipaddress.IPv4Address("127.0.0.1")


def test_thousands_of_leading_zeros_do_not_hit_the_int_digit_limit() -> None:
    host = "0" * 5000 + "177.1"
    assert addresses.parse_ip_literal(host) == _kernel(host) == ipaddress.IPv4Address("127.0.0.1")
    assert addresses.parse_ip_literal("1" * 5000) is None


_PART = st.one_of(
    st.integers(0, 2**32).map(str),
    st.integers(0, 2**32).map(lambda n: f"0{n:o}"),
    st.integers(0, 2**32).map(lambda n: f"0x{n:x}"),
    st.integers(0, 2**32).map(lambda n: f"0X{n:X}"),
    st.integers(0, 300).map(str),
    st.text(alphabet="0123456789abcdefxX", min_size=0, max_size=6),
)


@given(st.lists(_PART, min_size=1, max_size=5).map(".".join))
def test_every_dotted_spelling_agrees_with_inet_aton(host: str) -> None:
    found = addresses.parse_ip_literal(host)
    kernel = _kernel(host.removesuffix("."))  # one trailing dot is read away (see the trailing-dot test)
    if found is None:
        assert kernel is None or not addresses.ends_in_number(host)
    else:
        assert found == kernel


@given(st.text(alphabet="0123456789abcdefxX.", max_size=24))
def test_any_numeric_looking_host_agrees_with_inet_aton(host: str) -> None:
    found = addresses.parse_ip_literal(host)
    kernel = _kernel(host.removesuffix("."))  # one trailing dot is read away (see the trailing-dot test)
    if found is not None or addresses.ends_in_number(host):
        assert found == kernel


@given(st.integers(0, 2**32 - 1))
def test_every_ipv4_address_in_decimal_and_mapped_form(number: int) -> None:
    expected = ipaddress.IPv4Address(number)
    assert addresses.parse_ip_literal(str(number)) == expected
    assert addresses.parse_ip_literal(f"[::ffff:{expected}]") == expected
    assert addresses.fixed_deny(ipaddress.IPv6Address(f"::ffff:{expected}")) == addresses.fixed_deny(expected)


@pytest.mark.parametrize(
    ("address", "name"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local (metadata)"),
        ("169.254.0.1", "link-local"),
        ("100.64.0.1", "cgnat"),
        ("100.127.255.255", "cgnat"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "reserved"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fd00::1", "ula"),
        ("fc00::1", "ula"),
        ("fe80::1", "ipv6-link-local"),
        ("ff02::1", "multicast"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::a9fe:a9fe", "link-local (metadata)"),  # NAT64 of the metadata address
        ("2002:7f00:1::", "loopback"),  # 6to4 of loopback
    ],
)
def test_fixed_deny_names_the_range(address: str, name: str) -> None:
    assert addresses.fixed_deny(ipaddress.ip_address(address)) == name


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "64:ff9b::808:808"]
)
def test_public_addresses_are_outside_the_fixed_deny_set(address: str) -> None:
    assert addresses.fixed_deny(ipaddress.ip_address(address)) is None


@given(st.integers(0, 2**32 - 1))
def test_fixed_deny_covers_every_address_python_calls_non_global(number: int) -> None:
    """Python's own table of non-global IPv4 ranges is a second opinion: none of them is public to us."""
    address = ipaddress.IPv4Address(number)
    if not address.is_global and not address.is_multicast:
        assert addresses.fixed_deny(address) is not None, address


def test_fixed_deny_within_is_what_an_ipblock_excepts() -> None:
    import doctest

    everything = [str(n) for n in addresses.fixed_deny_within(ipaddress.IPv4Network("0.0.0.0/0"))]
    assert "169.254.0.0/16" in everything
    assert "169.254.169.254/32" not in everything  # inside link-local already
    assert addresses.fixed_deny_within(ipaddress.IPv4Network("10.0.0.0/8")) == ()
    assert doctest.testmod(addresses).failed == 0
