"""TEMPORARY stand-in for ``ironflow.egress`` (EGRESS_IFACE.md) until it lands on main; deleted then."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Decision",
    "EgressPolicy",
    "IPAddress",
    "InvalidEgressPolicy",
    "Rule",
    "decide",
    "decide_address",
    "fixed_deny",
    "parse_allow_host",
    "parse_ip_literal",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class InvalidEgressPolicy(ValueError):
    pass


def _part(text: str) -> int | None:
    try:
        if text.lower().startswith("0x"):
            return int(text[2:] or "0", 16)
        if len(text) > 1 and text.startswith("0"):
            return int(text[1:], 8)
        return int(text, 10) if text.isdigit() else None
    except ValueError:
        return None


def parse_ip_literal(host: str) -> IPAddress | None:
    text = host.strip().strip("[]")
    if ":" in text:
        try:
            v6 = ipaddress.IPv6Address(text)
        except ValueError:
            return None
        return v6.ipv4_mapped or v6
    parts = [_part(p) for p in text.split(".")]
    if not 1 <= len(parts) <= 4 or any(p is None for p in parts):
        return None
    nums = [p for p in parts if p is not None]
    value = 0
    for i, num in enumerate(nums[:-1]):
        if num > 255:
            return None
        value |= num << (24 - 8 * i)
    if nums[-1] >= 1 << (8 * (5 - len(nums))):
        return None
    return ipaddress.IPv4Address(value | nums[-1])


_FIXED: tuple[tuple[str, str], ...] = (
    ("169.254.169.254/32", "link-local (metadata)"),
    ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("169.254.0.0/16", "link-local"),
    ("100.64.0.0/10", "cgnat"),
    ("0.0.0.0/8", "unspecified"),
    ("224.0.0.0/4", "multicast"),
    ("::1/128", "loopback"),
    ("::/128", "unspecified"),
    ("fc00::/7", "ula"),
    ("fe80::/10", "ipv6-link-local"),
    ("ff00::/8", "multicast"),
)


def fixed_deny(address: IPAddress) -> str | None:
    for net, name in _FIXED:
        network = ipaddress.ip_network(net)
        if address.version == network.version and address in network:
            return name
    return None


@dataclass(frozen=True)
class Rule:
    host: str
    ports: tuple[int, ...] | None = (443, 80)
    methods: tuple[str, ...] | None = None
    path_prefix: str | None = None
    addresses: tuple[Network, ...] = ()

    def label(self) -> str:
        ports = "*" if self.ports is None else ",".join(map(str, self.ports))
        return f"{self.host}:{ports}"

    def network(self) -> Network | None:
        try:
            return ipaddress.ip_network(self.host.strip("[]"), strict=False)
        except ValueError:
            return None

    def matches_name(self, host: str, port: int) -> bool:
        if self.ports is not None and port not in self.ports:
            return False
        if self.host == "*":
            return True
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    def covers(self, address: IPAddress) -> bool:
        net = self.network()
        return net is not None and net.version == address.version and address in net


def parse_allow_host(text: str) -> Rule:
    spec, _, nets = text.partition("@")
    addresses = tuple(ipaddress.ip_network(n, strict=False) for n in nets.split(",") if n)
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif spec.count(":") == 1:
        host, _, port = spec.partition(":")
    else:
        host, port = spec, ""
    ports: tuple[int, ...] | None = (443, 80) if not port else None if port == "*" else (int(port),)
    return Rule(host.lower(), ports, addresses=addresses)


def _rule_from_json(raw: Any) -> Rule:
    if isinstance(raw, str):
        return parse_allow_host(raw)
    if not isinstance(raw, dict):
        raise InvalidEgressPolicy("invalid egress rule")
    ports = raw.get("ports", [443, 80])
    return Rule(
        str(raw["host"]).lower(),
        None if ports is None else tuple(ports),
        None if raw.get("methods") is None else tuple(raw["methods"]),
        raw.get("path_prefix"),
        tuple(ipaddress.ip_network(n) for n in raw.get("addresses", ())),
    )


def _rule_to_json(rule: Rule) -> dict[str, Any]:
    out: dict[str, Any] = {"host": rule.host, "ports": None if rule.ports is None else list(rule.ports)}
    if rule.methods is not None:
        out["methods"] = list(rule.methods)
    if rule.path_prefix is not None:
        out["path_prefix"] = rule.path_prefix
    if rule.addresses:
        out["addresses"] = [str(n) for n in rule.addresses]
    return out


@dataclass(frozen=True)
class EgressPolicy:
    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"allow": [_rule_to_json(r) for r in self.allow], "deny": [_rule_to_json(r) for r in self.deny]}

    @classmethod
    def from_json(cls, raw: object) -> EgressPolicy:
        if not isinstance(raw, dict):
            raise InvalidEgressPolicy("an egress policy must be an object")
        try:
            return cls(
                tuple(_rule_from_json(r) for r in raw.get("allow", ())),
                tuple(_rule_from_json(r) for r in raw.get("deny", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidEgressPolicy("invalid egress policy") from exc


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: str | None
    reason: str


def _http_ok(rule: Rule, method: str | None, path: str | None) -> bool:
    if rule.methods is not None and method is not None and method not in rule.methods:
        return False
    return rule.path_prefix is None or path is None or path.startswith(rule.path_prefix)


def decide(
    policy: EgressPolicy, host: str, port: int, *, method: str | None = None, path: str | None = None
) -> Decision:
    literal = parse_ip_literal(host)
    name = str(literal) if literal is not None else host.lower().rstrip(".")
    for rule in policy.deny:
        if rule.matches_name(name, port) or (literal is not None and rule.covers(literal)):
            return Decision(False, "deny " + rule.label(), f"denied by deny {rule.label()}")
    for rule in policy.allow:
        if literal is not None:
            if rule.covers(literal) and (rule.ports is None or port in rule.ports) and _http_ok(rule, method, path):
                return Decision(True, "allow " + rule.label(), f"allowed by allow {rule.label()}")
            if rule.host != "*":
                continue
            denied = fixed_deny(literal)
            if denied is not None:
                return Decision(False, None, f"{literal} is {denied}: only a rule naming it opens it")
        if rule.matches_name(name, port) and _http_ok(rule, method, path):
            return Decision(True, "allow " + rule.label(), f"allowed by allow {rule.label()}")
    if literal is not None and fixed_deny(literal) is not None:
        return Decision(False, None, f"{literal} is {fixed_deny(literal)}: only a rule naming it opens it")
    return Decision(False, None, f"no rule allows {name}:{port}")


def decide_address(policy: EgressPolicy, host: str, port: int, address: IPAddress) -> Decision:
    for rule in policy.deny:
        if rule.covers(address):
            return Decision(False, "deny " + rule.label(), f"{address} denied by deny {rule.label()}")
    denied = fixed_deny(address)
    if denied is None:
        return Decision(True, None, f"{address} is public")
    for rule in policy.allow:
        if rule.covers(address) and (rule.ports is None or port in rule.ports):
            return Decision(True, "allow " + rule.label(), f"{address} allowed by allow {rule.label()}")
        if rule.matches_name(host.lower(), port) and any(
            address.version == n.version and address in n for n in rule.addresses
        ):
            return Decision(True, "allow " + rule.label(), f"{address} allowed by allow {rule.label()}")
    return Decision(False, None, f"{host} resolved to {address}, which is {denied}")
