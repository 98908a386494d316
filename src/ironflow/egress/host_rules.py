"""One egress rule: its host (a name, ``*.suffix``, ``*``, an IP or CIDR), ports, and for plain
HTTP its methods and path prefix; its wire form and the CLI's ``--allow-host`` text (pure).

A rule is normalised when made: names lowercased without their trailing dot, IP literals in any
spelling written canonically (``0x7f.1`` is ``127.0.0.1``), methods uppercased, a path prefix
a plain path. Whatever can never match (a non-ASCII name, a port past 65535, a CIDR with host
bits) is refused in one line. How rules decide is :mod:`.policy`'s.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ironflow import errors
from ironflow.egress import addresses
from ironflow.egress.addresses import IPNetwork

__all__ = [
    "DEFAULT_PORTS",
    "InvalidEgressPolicy",
    "Kind",
    "Rule",
    "bad",
    "canonical_path",
    "normalise_name",
    "parse_allow_host",
]

#: The ports a rule naming a host alone opens.
DEFAULT_PORTS: Final = (443, 80)

_LABEL: Final = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_METHOD: Final = re.compile(r"[A-Z]{1,20}")
_ESCAPE: Final = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_WIRE_KEYS: Final = ("host", "ports", "methods", "path_prefix", "addresses")

Kind = Literal["any", "exact", "suffix", "net"]


class InvalidEgressPolicy(errors.ConfigError):
    """An egress rule, policy or profile that can never work; the message is one line naming it."""


def bad(text: str) -> str:
    """Text from the outside, cut for a one-line message."""
    return repr(text[:100])


def normalise_name(host: str) -> str | None:
    """``host`` as a lowercased DNS name without its trailing dot, or None when it is not one.

    A non-ASCII (IDNA) name is not one: rules and requests carry the ``xn--`` form.
    """
    name = host.lower()
    if name.endswith("."):
        name = name[:-1]
    if not name.isascii() or len(name) > 253 or not _NAME.fullmatch(name) or addresses.ends_in_number(name):
        return None
    return name


def _network(text: str) -> IPNetwork:
    """A CIDR range (or one address) of a rule, refused in one line when it is not one."""
    try:
        network = ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        raise InvalidEgressPolicy(f"invalid address range {bad(text)}: {exc}") from None
    if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(ipaddress.IPv6Network("::ffff:0:0/96")):
        raise InvalidEgressPolicy(f"invalid address range {bad(text)}: write the IPv4 range it maps")
    return network


def _rule_host(host: str) -> tuple[str, Kind, IPNetwork | None]:
    """A rule's host normalised: its text, how it matches and, for an IP or CIDR rule, its range."""
    if not isinstance(host, str) or not host.strip():
        raise InvalidEgressPolicy("an egress rule needs a host: a name, '*.suffix', '*', an IP or a CIDR range")
    text = host.strip()
    if text == "*":
        return "*", "any", None
    if "/" in text:
        network = _network(text)
        return str(network), "net", network
    address = addresses.parse_ip_literal(text)
    if address is not None:
        return str(address), "net", ipaddress.ip_network(address)
    suffix = text.startswith("*.")
    name = normalise_name(text[2:] if suffix else text)
    if name is None:
        raise InvalidEgressPolicy(
            f"invalid egress host {bad(text)}: expected a DNS name in ASCII (xn-- form), '*.suffix', '*', "
            "an IP address or a CIDR range"
        )
    return ("*." + name, "suffix", None) if suffix else (name, "exact", None)


def canonical_path(path: str) -> str | None:
    """``path`` without query, its unreserved escapes decoded; None when servers may read it otherwise."""
    path = path.partition("?")[0].partition("#")[0]
    if not path.startswith("/"):
        return None
    path = _ESCAPE.sub(lambda m: chr(int(m[1], 16)) if chr(int(m[1], 16)) in _UNRESERVED else m[0].upper(), path)
    if "\\" in path or "%2F" in path or "%5C" in path or "%00" in path:
        return None
    if any(segment in (".", "..") for segment in path.split("/")):
        return None
    return path


@dataclass(frozen=True)
class Rule:
    """One allow or deny rule; ``ports`` None is any port, ``methods``/``path_prefix`` scope plain HTTP only."""

    host: str
    ports: tuple[int, ...] | None = DEFAULT_PORTS
    methods: tuple[str, ...] | None = None
    path_prefix: str | None = None
    addresses: tuple[IPNetwork, ...] = ()
    kind: Kind = field(init=False, repr=False, compare=False, default="exact")
    network: IPNetwork | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        host, kind, network = _rule_host(self.host)
        object.__setattr__(self, "host", host)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "network", network)
        if self.ports is not None:
            ports = tuple(self.ports)
            if not ports or any(isinstance(p, bool) or not isinstance(p, int) or not 0 < p < 65536 for p in ports):
                raise InvalidEgressPolicy(f"invalid ports {list(ports)!r} for {host}: each 1-65535, or '*' for any")
            object.__setattr__(self, "ports", tuple(dict.fromkeys(ports)))
        if self.methods is not None:
            methods = tuple(str(m).upper() for m in self.methods)
            if not methods or not all(_METHOD.fullmatch(m) for m in methods):
                raise InvalidEgressPolicy(f"invalid methods {list(self.methods)!r} for {host}: HTTP method names")
            object.__setattr__(self, "methods", tuple(dict.fromkeys(methods)))
        if self.path_prefix is not None and (
            not isinstance(self.path_prefix, str)
            or len(self.path_prefix) > 1024
            or canonical_path(self.path_prefix) != self.path_prefix
            or "?" in self.path_prefix
        ):
            raise InvalidEgressPolicy(
                f"invalid path_prefix {bad(str(self.path_prefix))} for {host}: "
                "a plain path starting with '/', no query, no dot segments, no escaped letters"
            )
        if self.addresses:
            if kind == "net":
                raise InvalidEgressPolicy(f"{host} is an address range: 'addresses' belongs to a rule naming a host")
            object.__setattr__(self, "addresses", tuple(_network(str(a)) for a in self.addresses))

    @property
    def scoped(self) -> bool:
        """Whether the rule looks inside requests (method or path), which a ``CONNECT`` tunnel does not show."""
        return self.methods is not None or self.path_prefix is not None

    def label(self) -> str:
        """The rule as shown in a decision, e.g. ``*.github.com:443`` or ``pypi.org:443 GET /simple/``.

        A :class:`Decision` prefixes it with ``allow`` or ``deny``.
        """
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = f"{host}:{'*' if self.ports is None else ','.join(map(str, self.ports))}"
        if self.addresses:
            text += "@" + ",".join(map(str, self.addresses))
        if self.methods is not None:
            text += " " + ",".join(self.methods)
        if self.path_prefix is not None:
            text += " " + self.path_prefix
        return text

    def to_json(self) -> dict[str, Any]:
        """The wire form; every key read by :meth:`EgressPolicy.from_json`."""
        out: dict[str, Any] = {"host": self.host, "ports": "*" if self.ports is None else list(self.ports)}
        if self.methods is not None:
            out["methods"] = list(self.methods)
        if self.path_prefix is not None:
            out["path_prefix"] = self.path_prefix
        if self.addresses:
            out["addresses"] = [str(a) for a in self.addresses]
        return out

    @classmethod
    def from_json(cls, raw: object) -> Rule:
        """One rule of the wire form: the ``--allow-host`` text or a mapping of :data:`_WIRE_KEYS`."""
        if isinstance(raw, str):
            return parse_allow_host(raw)
        if not isinstance(raw, Mapping):
            raise InvalidEgressPolicy(f"an egress rule is a string or a mapping, not {type(raw).__name__}")
        unknown = sorted(set(map(str, raw)) - set(_WIRE_KEYS))
        if unknown:
            raise InvalidEgressPolicy(f"unknown egress rule key {unknown[0]!r} (known: {', '.join(_WIRE_KEYS)})")
        ports = raw.get("ports", list(DEFAULT_PORTS))
        if isinstance(ports, int):
            ports = [ports]
        if ports is not None and ports != "*" and not isinstance(ports, list):
            raise InvalidEgressPolicy("egress rule 'ports' is a list of ports or '*'")
        methods = _string_list(raw.get("methods"), "methods")
        found = _string_list(raw.get("addresses"), "addresses") or ()
        path = raw.get("path_prefix")
        if path is not None and not isinstance(path, str):
            raise InvalidEgressPolicy("egress rule 'path_prefix' is a string")
        return cls(
            host=raw.get("host"),  # type: ignore[arg-type]  # checked in __post_init__
            ports=None if ports in (None, "*") else tuple(ports),
            methods=None if methods is None else tuple(methods),
            path_prefix=path,
            addresses=tuple(_network(a) for a in found),
        )


def _string_list(raw: object, key: str) -> list[str] | None:
    """A rule's list of strings, or None when absent."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise InvalidEgressPolicy(f"egress rule {key!r} is a list of strings")
    return raw


def parse_allow_host(text: str) -> Rule:
    """The CLI's ``HOST[:PORT][@CIDR,...]``: ``github.com`` (443 and 80), ``*.pypi.org:443``, ``[::1]:8443``,
    ``10.0.0.0/8:*``, ``svc.ns:80@10.96.0.0/12`` (the name may resolve into that range)."""
    spec, at, ranges = text.strip().partition("@")
    found = tuple(_network(r) for r in ranges.split(",")) if at else ()
    port_text: str | None
    if spec.startswith("["):
        host, close, rest = spec[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise InvalidEgressPolicy(f"invalid --allow-host {bad(text)}: expected [IPv6]:PORT")
        port_text = rest[1:] if rest else None
    elif spec.count(":") > 1:
        host, port_text = spec, None
    else:
        host, colon, port_text = spec.partition(":")
        port_text = port_text if colon else None
    if port_text is None:
        ports: tuple[int, ...] | None = DEFAULT_PORTS
    elif port_text == "*":
        ports = None
    elif port_text.isascii() and port_text.isdigit() and len(port_text) <= 5:
        ports = (int(port_text),)
    else:
        raise InvalidEgressPolicy(f"invalid port in {bad(text)}: expected HOST:PORT (1-65535) or HOST:*")
    return Rule(host=host, ports=ports, addresses=found)
