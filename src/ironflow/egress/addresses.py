"""IP literals as the kernel reads them, and the fixed deny set no wildcard opens (pure).

An SSRF guard that reads ``http://2130706433/`` as a name lets it through to ``127.0.0.1``:
glibc's ``inet_aton`` (which ``getaddrinfo`` and so every client uses) takes one to four
dot-separated parts, each decimal, octal (leading ``0``) or hex (``0x``), the last part filling
the remaining bytes. :func:`parse_ip_literal` reads a host exactly that way (``socket.inet_aton``
is its oracle in the tests), IPv6 with or without brackets, and hands an IPv4-mapped or
-compatible IPv6 address back as the IPv4 address it reaches.

:func:`fixed_deny` names the ranges a sandbox never reaches unless a rule names them:

==================  ==========================================================================
name                ranges
==================  ==========================================================================
unspecified         0.0.0.0/8, ::/128
loopback            127.0.0.0/8, ::1/128
private             10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 (RFC 1918)
cgnat               100.64.0.0/10
link-local          169.254.0.0/16 (169.254.169.254 is "link-local (metadata)")
reserved            192.0.0.0/24, 240.0.0.0/4 (incl. broadcast), 100::/64
documentation       192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32
benchmarking        198.18.0.0/15
multicast           224.0.0.0/4, ff00::/8
ula                 fc00::/7
ipv6-link-local     fe80::/10
ipv6-site-local     fec0::/10
nat64-local         64:ff9b:1::/48
==================  ==========================================================================

IPv6 forms that carry an IPv4 address (mapped ``::ffff:a.b.c.d``, compatible ``::a.b.c.d``,
NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by the IPv4 address inside them. Never
resolves a name, never opens a socket.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final

__all__ = [
    "FIXED_DENY_RANGES",
    "IPAddress",
    "IPNetwork",
    "ends_in_number",
    "fixed_deny",
    "fixed_deny_within",
    "parse_ip_literal",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_N = ipaddress.ip_network
#: The fixed deny set, most specific first (the metadata address before its link-local range).
FIXED_DENY_RANGES: Final[tuple[tuple[IPNetwork, str], ...]] = (
    (_N("169.254.169.254/32"), "link-local (metadata)"),
    (_N("0.0.0.0/8"), "unspecified"),
    (_N("10.0.0.0/8"), "private"),
    (_N("100.64.0.0/10"), "cgnat"),
    (_N("127.0.0.0/8"), "loopback"),
    (_N("169.254.0.0/16"), "link-local"),
    (_N("172.16.0.0/12"), "private"),
    (_N("192.0.0.0/24"), "reserved"),
    (_N("192.0.2.0/24"), "documentation"),
    (_N("192.168.0.0/16"), "private"),
    (_N("198.18.0.0/15"), "benchmarking"),
    (_N("198.51.100.0/24"), "documentation"),
    (_N("203.0.113.0/24"), "documentation"),
    (_N("224.0.0.0/4"), "multicast"),
    (_N("240.0.0.0/4"), "reserved"),
    (_N("::/128"), "unspecified"),
    (_N("::1/128"), "loopback"),
    (_N("64:ff9b:1::/48"), "nat64-local"),
    (_N("100::/64"), "reserved"),
    (_N("2001:db8::/32"), "documentation"),
    (_N("fc00::/7"), "ula"),
    (_N("fe80::/10"), "ipv6-link-local"),
    (_N("fec0::/10"), "ipv6-site-local"),
    (_N("ff00::/8"), "multicast"),
)
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
#: The same table as integers, by IP version: a mask and compare each (``in`` costs ~0.5 µs a range).
_BY_VERSION: Final[dict[int, tuple[tuple[int, int, str], ...]]] = {
    version: tuple(
        (int(network.network_address), int(network.netmask), name)
        for network, name in FIXED_DENY_RANGES
        if network.version == version
    )
    for version in (4, 6)
}

#: One part of an inet_aton address: hex (0x, at least one digit), octal (leading 0) or decimal.
_PART: Final = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")
#: A label that makes a host "end in a number": it must then be an address, never a name.
_NUMERIC_LABEL: Final = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")
_IPV6_CHARS: Final = re.compile(r"[0-9a-fA-F:.]+(%[0-9A-Za-z_.-]+)?")


def _parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """inet_aton's reading of ``host``, or None where inet_aton would refuse it."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    values: list[int] = []
    for part in parts:
        if not _PART.fullmatch(part):
            return None
        if part[:2] in ("0x", "0X"):
            digits, base, most = part[2:].lstrip("0"), 16, 8
        else:
            digits, base, most = part.lstrip("0"), 8 if part.startswith("0") else 10, 11
        if len(digits) > most:  # past 32 bits whatever the digits (and no 4300-digit int parse)
            return None
        values.append(int(digits or "0", base))
    *leading, last = values
    if any(value > 255 for value in leading) or last >= 1 << (8 * (5 - len(values))):
        return None
    number = last
    for index, value in enumerate(leading):
        number |= value << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped or -compatible IPv6 address reaches (``::`` and ``::1`` are not)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    number = int(address)
    if 1 < number < 1 << 32:
        return ipaddress.IPv4Address(number)
    return None


def parse_ip_literal(host: str) -> IPAddress | None:
    """``host`` as the address a client would connect to, or None when it is not an address.

    A trailing dot is ignored (``127.0.0.1.`` is refused by inet_aton but may still reach
    loopback through a resolver). A host that ends in a number yet is no address
    (``1.2.3.999``) is None here; :func:`ends_in_number` lets a caller refuse it as a name.
    """
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host:
        if not _IPV6_CHARS.fullmatch(host):
            return None
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            return None
        if address.scope_id is not None:
            address = ipaddress.IPv6Address(host.partition("%")[0])
        return _embedded_ipv4(address) or address
    if not ends_in_number(host):
        return None
    return _parse_ipv4(host.removesuffix("."))


def ends_in_number(host: str) -> bool:
    """Whether ``host``'s last label is a number (``1.2.3.999``, ``a.0x1f``): an address or nothing, never a name."""
    return _NUMERIC_LABEL.fullmatch(host.removesuffix(".").rpartition(".")[2]) is not None


def fixed_deny(address: IPAddress) -> str | None:
    """The name of the fixed-deny range ``address`` is in, or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is None and address in _NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is None:
            inner = address.sixtofour
        if inner is not None:
            return fixed_deny(inner)
    number = int(address)
    for base, mask, name in _BY_VERSION[address.version]:
        if number & mask == base:
            return name
    return None


def fixed_deny_within(network: IPNetwork) -> tuple[IPNetwork, ...]:
    """The fixed-deny ranges strictly inside ``network``, none inside another: a NetworkPolicy
    ``ipBlock``'s ``except`` for it (a range that is itself in the set was named on purpose: none).

    >>> [str(n) for n in fixed_deny_within(ipaddress.ip_network("169.254.0.0/15"))]
    ['169.254.0.0/16']
    """
    inside = [
        found
        for found, _ in FIXED_DENY_RANGES
        if found.version == network.version and found != network and found.subnet_of(network)  # type: ignore[arg-type]
    ]
    return tuple(
        found
        for found in inside
        if not any(other != found and found.subnet_of(other) for other in inside)  # type: ignore[arg-type]
    )
