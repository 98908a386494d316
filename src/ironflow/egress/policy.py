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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Final

from ironflow import settings_file
from ironflow.egress import addresses, host_rules
from ironflow.egress.addresses import IPAddress
from ironflow.egress.host_rules import DEFAULT_PORTS, InvalidEgressPolicy, Rule, parse_allow_host

__all__ = [
    "DEFAULT_PORTS",
    "MAX_RULES",
    "Decision",
    "EgressPolicy",
    "InvalidEgressPolicy",
    "Rule",
    "decide",
    "decide_address",
    "decide_address_remembered",
    "decide_remembered",
    "parse_allow_host",
]

#: Most rules one policy holds (a bound on what a token request or a file can make the proxy keep).
MAX_RULES: Final = 10_000
#: Decisions one policy remembers for :func:`decide_remembered` (past this many it starts over).
_REMEMBERED: Final = 4096


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
    _remembered: tuple[dict[Any, Decision], dict[Any, Decision]] = field(
        init=False, repr=False, compare=False, default_factory=lambda: ({}, {})
    )

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
        """A policy from its wire form; ``"profiles"`` names entries of ``profiles``.

        :func:`ironflow.egress.profiles.from_json` passes the built-in profiles (and a file's
        own); with none given, a policy that names a profile is refused. ``to_json`` never
        writes ``"profiles"``: a policy crosses the wire expanded.

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
        for name in names:
            if profiles is None:  # the wire between processes: what a client sends is expanded
                raise InvalidEgressPolicy(
                    f"egress profile {name[:100]!r} is not read here: send its rules (egress.profiles.from_json)"
                )
            found = profiles.get(name)
            if found is None:
                known = sorted(profiles)
                raise InvalidEgressPolicy(settings_file.unknown_name_message("egress profile", name[:100], known))
            policy = found.merged(policy)
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
    canonical = None if path is None else host_rules.canonical_path(path)
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
    name = None if address is not None else host_rules.normalise_name(host)
    if address is None and name is None:
        shown = host_rules.bad(host)
        return Decision(False, None, f"refused host {shown}: neither an ASCII DNS name nor an IP address")
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
    name = host_rules.normalise_name(host)
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


def decide_remembered(
    policy: EgressPolicy, host: str, port: int, *, method: str | None = None, path: str | None = None
) -> Decision:
    """:func:`decide`, remembered by the policy: a policy is an immutable value and a decision a
    function of it and the request alone, so a proxy works each destination out once per policy."""
    return _remembered(
        policy._remembered[0], (host, port, method, path), lambda: decide(policy, host, port, method=method, path=path)
    )


def decide_address_remembered(policy: EgressPolicy, host: str, port: int, address: IPAddress) -> Decision:
    """:func:`decide_address`, remembered by the policy as :func:`decide_remembered` is."""
    key = (host, port, address)
    return _remembered(policy._remembered[1], key, lambda: decide_address(policy, host, port, address))


def _remembered(table: dict[Any, Decision], key: Any, work: Callable[[], Decision]) -> Decision:
    """``table[key]``, made by ``work`` the first time (past :data:`_REMEMBERED` entries it starts over)."""
    found = table.get(key)
    if found is None:
        if len(table) >= _REMEMBERED:
            table.clear()
        found = table[key] = work()
    return found
