"""The egress policy: which host, port, method and path a sandbox may reach, and the rule that said so (pure).

A policy is allow rules and deny rules; the default, ``EgressPolicy()``, denies everything (the
model is reached through the auth proxy's relay, not through egress). The rule table:

:func:`decide`, before resolution (the proxy's first look at a request or ``CONNECT``):

1. a host that is neither an ASCII DNS name nor an IP literal (any spelling) is refused;
2. a matching deny rule refuses, whatever allows; a deny rule scoped by method or path matches
   every ``CONNECT`` to its host, since a tunnel does not show them (fails closed);
3. an IP literal in the fixed deny set (:mod:`.addresses`) is refused unless an allow rule
   naming it (an IP or CIDR rule covering it) matches; ``*`` never opens it, nor ``localhost``
   and its subdomains (loopback by name, RFC 6761);
4. the first allow rule matching host, port and, for plain HTTP, method and path prefix allows;
   a rule scoped by method or path never allows a ``CONNECT``;
5. nothing matched: refused.

:func:`decide_address`, after the proxy resolved a name to the one address it will connect to:

1. a deny rule whose IP or CIDR covers the address refuses;
2. an address in the fixed deny set is refused unless an allow rule names it: an IP or CIDR rule
   covering it, or a rule matching host and port whose ``addresses`` cover it (an in-cluster
   service's name);
3. otherwise the address passes.

Names match case-insensitively, without a trailing dot; ``*.github.com`` matches strict
subdomains only (not ``github.com``, never ``evilgithub.com``). Paths are compared after
decoding percent-escaped unreserved characters; a path with dot segments or an encoded slash is
ambiguous and matches every path-scoped deny rule and no path-scoped allow rule.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Final, Literal

from ironflow import errors
from ironflow.egress import addresses
from ironflow.egress.addresses import IPAddress, IPNetwork

__all__ = [
    "DEFAULT_PORTS",
    "Decision",
    "EgressPolicy",
    "InvalidEgressPolicy",
    "Rule",
    "decide",
    "decide_address",
    "parse_allow_host",
]

#: The ports a rule naming a host alone opens.
DEFAULT_PORTS: Final = (443, 80)
#: Most rules one policy holds (a bound on what a token request or a file can make the proxy keep).
MAX_RULES: Final = 10_000

_LABEL: Final = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_METHOD: Final = re.compile(r"[A-Z]{1,20}")
_ESCAPE: Final = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_WIRE_KEYS: Final = ("host", "ports", "methods", "path_prefix", "addresses")

Kind = Literal["any", "exact", "suffix", "net"]


class InvalidEgressPolicy(errors.ConfigError):
    """An egress rule, policy or profile that can never work; the message is one line naming it."""


def _bad(text: str) -> str:
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
        raise InvalidEgressPolicy(f"invalid address range {_bad(text)}: {exc}") from None
    if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(ipaddress.IPv6Network("::ffff:0:0/96")):
        raise InvalidEgressPolicy(f"invalid address range {_bad(text)}: write the IPv4 range it maps")
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
            f"invalid egress host {_bad(text)}: expected a DNS name in ASCII (xn-- form), '*.suffix', '*', "
            "an IP address or a CIDR range"
        )
    return ("*." + name, "suffix", None) if suffix else (name, "exact", None)


def _canonical_path(path: str) -> str | None:
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
            or _canonical_path(self.path_prefix) != self.path_prefix
            or "?" in self.path_prefix
        ):
            raise InvalidEgressPolicy(
                f"invalid path_prefix {_bad(str(self.path_prefix))} for {host}: "
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
            raise InvalidEgressPolicy(f"invalid --allow-host {_bad(text)}: expected [IPv6]:PORT")
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
        raise InvalidEgressPolicy(f"invalid port in {_bad(text)}: expected HOST:PORT (1-65535) or HOST:*")
    return Rule(host=host, ports=ports, addresses=found)


class _Index:
    """A rule list looked up by host: exact names in a dict, suffixes by label, ranges by prefix length.

    Each lookup yields ``(position, rule)`` so the first rule of the list still decides.
    """

    __slots__ = ("any", "exact", "nets", "suffix")

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.exact: dict[str, list[tuple[int, Rule]]] = {}
        self.suffix: dict[str, list[tuple[int, Rule]]] = {}
        self.any: list[tuple[int, Rule]] = []
        self.nets: dict[tuple[int, int], dict[int, list[tuple[int, Rule]]]] = {}
        for entry in enumerate(rules):
            rule = entry[1]
            if rule.kind == "exact":
                self.exact.setdefault(rule.host, []).append(entry)
            elif rule.kind == "suffix":
                self.suffix.setdefault(rule.host[2:], []).append(entry)
            elif rule.kind == "any":
                self.any.append(entry)
            else:
                assert rule.network is not None
                key = (rule.network.version, rule.network.prefixlen)
                self.nets.setdefault(key, {}).setdefault(int(rule.network.network_address), []).append(entry)

    def for_name(self, name: str) -> Iterable[tuple[int, Rule]]:
        """The rules whose host matches ``name`` (exact, a suffix of it, ``*``)."""
        yield from self.exact.get(name, ())
        rest = name
        while "." in rest:
            rest = rest.partition(".")[2]
            yield from self.suffix.get(rest, ())
        yield from self.any

    def for_address(self, address: IPAddress) -> Iterable[tuple[int, Rule]]:
        """The IP and CIDR rules covering ``address`` (not ``*``)."""
        number, bits = int(address), address.max_prefixlen
        for (version, prefixlen), table in self.nets.items():
            if version == address.version:
                yield from table.get(number >> (bits - prefixlen) << (bits - prefixlen), ())


@dataclass(frozen=True)
class EgressPolicy:
    """Allow and deny rules; the default denies everything. Deny rules win over allow rules."""

    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    _indexes: tuple[_Index, _Index] | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow", tuple(self.allow))
        object.__setattr__(self, "deny", tuple(self.deny))
        if not all(isinstance(rule, Rule) for rule in self.allow + self.deny):
            raise InvalidEgressPolicy("an egress policy holds Rule values (EgressPolicy.from_json reads the wire form)")
        if len(self.allow) + len(self.deny) > MAX_RULES:
            raise InvalidEgressPolicy(f"an egress policy holds at most {MAX_RULES} rules")

    def indexes(self) -> tuple[_Index, _Index]:
        """The allow and deny lists indexed for lookup, built once on the first decision."""
        if self._indexes is None:
            object.__setattr__(self, "_indexes", (_Index(self.allow), _Index(self.deny)))
        assert self._indexes is not None
        return self._indexes

    def to_json(self) -> dict[str, Any]:
        """The wire form (profiles expanded): ``{"allow": [...], "deny": [...]}``."""
        return {"allow": [rule.to_json() for rule in self.allow], "deny": [rule.to_json() for rule in self.deny]}

    @classmethod
    def from_json(cls, raw: object, *, profiles: Mapping[str, EgressPolicy] | None = None) -> EgressPolicy:
        """A policy from its wire form; ``"profiles"`` names built-in ones or ``profiles`` (a file's own).

        Raises:
            InvalidEgressPolicy: one line naming the entry that is wrong.
        """
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise InvalidEgressPolicy(
                f"an egress policy is a mapping of allow, deny, profiles, not {type(raw).__name__}"
            )
        unknown = sorted(set(map(str, raw)) - {"allow", "deny", "profiles"})
        if unknown:
            raise InvalidEgressPolicy(f"unknown egress key {unknown[0]!r} (known: allow, deny, profiles)")
        lists: dict[str, tuple[Rule, ...]] = {}
        for key in ("allow", "deny"):
            entries = raw.get(key) or []
            if not isinstance(entries, list):
                raise InvalidEgressPolicy(f"egress {key!r} is a list of rules")
            if len(entries) > MAX_RULES:
                raise InvalidEgressPolicy(f"an egress policy holds at most {MAX_RULES} rules")
            rules = []
            for position, entry in enumerate(entries):
                try:
                    rules.append(Rule.from_json(entry))
                except InvalidEgressPolicy as exc:
                    raise InvalidEgressPolicy(f"egress {key}[{position}]: {exc.message}") from None
            lists[key] = tuple(rules)
        policy = cls(allow=lists["allow"], deny=lists["deny"])
        names = raw.get("profiles") or []
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise InvalidEgressPolicy("egress 'profiles' is a list of profile names")
        from ironflow.egress import profiles as named  # imported here: profiles are built of this module's values

        for name in names:
            policy = named.profile(name, profiles or {}).merged(policy)
        return policy

    def merged(self, other: EgressPolicy) -> EgressPolicy:
        """Both policies' rules, this one's first, each rule once."""
        return EgressPolicy(
            allow=tuple(dict.fromkeys(self.allow + other.allow)), deny=tuple(dict.fromkeys(self.deny + other.deny))
        )


@dataclass(frozen=True)
class Decision:
    """What a policy said of one destination: ``rule`` is the deciding rule's label (None: nothing matched)."""

    allowed: bool
    rule: str | None
    reason: str


def _first(
    entries: Iterable[tuple[int, Rule]], port: int, method: str | None, path: str | None, *, unseen: bool
) -> Rule | None:
    """The earliest rule of ``entries`` matching port, method and path.

    ``unseen`` is what a method- or path-scoped rule says of a request whose method or path it
    cannot see or read unambiguously: True for deny rules (fail closed), False for allow rules.
    """
    best: tuple[int, Rule] | None = None
    for position, rule in entries:
        if best is not None and position >= best[0]:
            continue
        if rule.ports is not None and port not in rule.ports:
            continue
        if rule.scoped and not _scope_matches(rule, method, path, unseen=unseen):
            continue
        best = (position, rule)
    return None if best is None else best[1]


def _scope_matches(rule: Rule, method: str | None, path: str | None, *, unseen: bool) -> bool:
    """Whether a method- or path-scoped rule covers the request (``unseen``: see :func:`_first`)."""
    if method is None:
        return unseen
    if rule.methods is not None and (method.upper() if unseen else method) not in rule.methods:
        return False
    if rule.path_prefix is None:
        return True
    canonical = None if path is None else _canonical_path(path)
    if canonical is None:
        return unseen
    return canonical.startswith(rule.path_prefix)


def _shown(host: str, port: int, method: str | None, path: str | None) -> str:
    """The destination as a reason shows it."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"{method} {where}{path or ''}" if method is not None else where


def decide(
    policy: EgressPolicy, host: str, port: int, *, method: str | None = None, path: str | None = None
) -> Decision:
    """Whether ``host:port`` (a ``CONNECT`` when ``method`` is None) may be reached, before resolution."""
    address = addresses.parse_ip_literal(host)
    name = None if address is not None else normalise_name(host)
    if address is None and name is None:
        return Decision(False, None, f"refused host {_bad(host)}: neither an ASCII DNS name nor an IP address")
    if not 0 < port < 65536:
        return Decision(False, None, f"refused port {port}: 1-65535")
    allow_index, deny_index = policy.indexes()
    if address is not None:
        shown = _shown(str(address), port, method, path)
        denier = _first(chain(deny_index.for_address(address), deny_index.any), port, method, path, unseen=True)
    else:
        assert name is not None
        shown = _shown(name, port, method, path)
        denier = _first(deny_index.for_name(name), port, method, path, unseen=True)
    if denier is not None:
        unseen = (
            " (scoped by method or path, which a CONNECT tunnel does not show)"
            if denier.scoped and method is None
            else ""
        )
        return Decision(False, f"deny {denier.label()}", f"denied by deny {denier.label()}{unseen}")
    if address is not None:
        fixed = addresses.fixed_deny(address)
        entries = allow_index.for_address(address)
        allower = _first(entries if fixed else chain(entries, allow_index.any), port, method, path, unseen=False)
        if fixed is not None and allower is None:
            return Decision(False, None, f"{address} is {fixed}: only a rule naming it opens it")
    else:
        assert name is not None
        loopback = name == "localhost" or name.endswith(".localhost")  # loopback by name (RFC 6761)
        entries = allow_index.for_name(name)
        if loopback:  # '*' never opens it, as it never opens 127.0.0.1
            entries = (entry for entry in entries if entry[1].kind != "any")
        allower = _first(entries, port, method, path, unseen=False)
        if allower is None and loopback:
            return Decision(False, None, f"{name} is loopback by name: only a rule naming it opens it")
    if allower is not None:
        return Decision(True, f"allow {allower.label()}", f"allowed by allow {allower.label()}")
    if method is None:
        entries = allow_index.for_address(address) if address is not None else allow_index.for_name(name or "")
        scoped = next((rule for _, rule in entries if rule.scoped and (rule.ports is None or port in rule.ports)), None)
        if scoped is not None:
            return Decision(
                False,
                None,
                f"no rule allows {shown}: allow {scoped.label()} is scoped by method or path, "
                "which a CONNECT tunnel does not show",
            )
    return Decision(False, None, f"no rule allows {shown}")


def decide_address(policy: EgressPolicy, host: str, port: int, address: IPAddress) -> Decision:
    """Whether the address ``host`` resolved to may be connected to (after :func:`decide` allowed ``host``)."""
    address = addresses.parse_ip_literal(str(address)) or address  # a mapped IPv6 address is its IPv4 one
    allow_index, deny_index = policy.indexes()
    # decide() checked methods and paths already: a scoped rule counts here (unseen=True).
    denier = _first(deny_index.for_address(address), port, None, None, unseen=True)
    if denier is not None:
        return Decision(False, f"deny {denier.label()}", f"{address} is denied by deny {denier.label()}")
    fixed = addresses.fixed_deny(address)
    if fixed is None:
        return Decision(True, None, f"{address} is a public address")
    opener = _first(allow_index.for_address(address), port, None, None, unseen=True)
    name = normalise_name(host)
    if opener is None and name is not None:
        named = (
            (position, rule)
            for position, rule in allow_index.for_name(name)
            if any(address in network for network in rule.addresses if network.version == address.version)
        )
        opener = _first(named, port, None, None, unseen=True)
    if opener is not None:
        return Decision(True, f"allow {opener.label()}", f"{address} ({fixed}) is opened by allow {opener.label()}")
    return Decision(False, None, f"{host} resolved to {address}, which is {fixed}: only a rule naming it opens it")
