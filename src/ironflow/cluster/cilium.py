"""A structural check of CiliumNetworkPolicy objects, offline (pure).

No CiliumNetworkPolicy schema ships with ironflow's test tools, so this module checks
what our policies rely on, from the ``cilium.io/v2`` CRD's documented shape:

* ``apiVersion: cilium.io/v2``, ``kind: CiliumNetworkPolicy``, ``metadata.name`` (a DNS
  subdomain) and ``metadata.namespace``; no key outside ``apiVersion, kind, metadata,
  spec, specs``;
* ``spec`` has exactly one of ``endpointSelector`` / ``nodeSelector``, and only the
  keys the CRD knows; selectors hold only ``matchLabels`` (string to string) and
  ``matchExpressions``;
* each ingress / egress rule uses only the CRD's keys and at most one L3 peer kind
  (Cilium refuses ``toFQDNs`` next to ``toEndpoints`` in one rule);
* ``toFQDNs`` entries hold exactly one of ``matchName`` / ``matchPattern``;
* ``toPorts[].ports[]``: ``port`` a *string* of 1–65535 (the CRD types it as a string),
  ``protocol`` one of TCP, UDP, SCTP, ANY; ``rules.dns`` entries like ``toFQDNs``;
* a policy with ``toFQDNs`` also has a DNS rule on port 53 with ``rules.dns``: Cilium
  learns the IPs behind names by inspecting DNS answers, so without it no name resolves.

Not checked: CEL-level rules, label-key syntax, ``toServices`` / ``toGroups`` contents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["check_cilium_network_policy"]

_TOP_KEYS: Final = {"apiVersion", "kind", "metadata", "spec", "specs", "status"}
_SPEC_KEYS: Final = {
    "endpointSelector",
    "nodeSelector",
    "ingress",
    "ingressDeny",
    "egress",
    "egressDeny",
    "labels",
    "description",
    "enableDefaultDeny",
}
_EGRESS_L3: Final = {"toEndpoints", "toFQDNs", "toCIDR", "toCIDRSet", "toEntities", "toServices", "toGroups", "toNodes"}
_EGRESS_KEYS: Final = _EGRESS_L3 | {"toPorts", "toRequires", "icmps", "authentication"}
_INGRESS_L3: Final = {"fromEndpoints", "fromCIDR", "fromCIDRSet", "fromEntities", "fromGroups", "fromNodes"}
_INGRESS_KEYS: Final = _INGRESS_L3 | {"toPorts", "fromRequires", "icmps", "authentication"}
_PROTOCOLS: Final = {"TCP", "UDP", "SCTP", "ANY"}
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_cilium_network_policy(obj: Mapping[str, Any]) -> list[str]:
    """Every structural problem of ``obj``, each naming its place; empty when sound."""
    problems: list[str] = []
    if obj.get("apiVersion") != "cilium.io/v2" or obj.get("kind") != "CiliumNetworkPolicy":
        return [f"not a cilium.io/v2 CiliumNetworkPolicy: {obj.get('apiVersion')}/{obj.get('kind')}"]
    problems += [f"unknown top-level key '{k}'" for k in sorted(set(obj) - _TOP_KEYS)]
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return [*problems, "metadata must be a mapping"]
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not _NAME.fullmatch(name):
        problems.append(f"metadata.name {name!r} is not a DNS subdomain")
    if not isinstance(meta.get("namespace"), str) or not meta["namespace"]:
        problems.append("metadata.namespace is missing: a CiliumNetworkPolicy is namespaced")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [*problems, "spec must be a mapping"]
    problems += [f"spec: unknown key '{k}'" for k in sorted(set(spec) - _SPEC_KEYS)]
    selectors = [k for k in ("endpointSelector", "nodeSelector") if k in spec]
    if len(selectors) != 1:
        problems.append("spec needs exactly one of endpointSelector and nodeSelector")
    for key in selectors:
        problems += _selector(spec[key], f"spec.{key}")
    for direction, keys, l3 in (("egress", _EGRESS_KEYS, _EGRESS_L3), ("ingress", _INGRESS_KEYS, _INGRESS_L3)):
        rules = spec.get(direction, [])
        if not isinstance(rules, list):
            problems.append(f"spec.{direction} must be a list")
            continue
        for index, rule in enumerate(rules):
            problems += _rule(rule, f"spec.{direction}[{index}]", keys, l3)
    egress = spec.get("egress", [])
    uses_fqdn = isinstance(egress, list) and any(isinstance(r, Mapping) and "toFQDNs" in r for r in egress)
    if uses_fqdn and not any(_is_dns_rule(r) for r in egress):
        problems.append("spec.egress uses toFQDNs without a DNS rule on port 53 (rules.dns): no name would resolve")
    return problems


def _selector(selector: object, where: str) -> list[str]:
    if not isinstance(selector, Mapping):
        return [f"{where} must be a mapping"]
    problems = [f"{where}: unknown key '{k}'" for k in sorted(set(selector) - {"matchLabels", "matchExpressions"})]
    match = selector.get("matchLabels", {})
    if not isinstance(match, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in match.items()):
        problems.append(f"{where}.matchLabels must map strings to strings")
    return problems


def _rule(rule: object, where: str, keys: set[str] | frozenset[str], l3: set[str] | frozenset[str]) -> list[str]:
    if not isinstance(rule, Mapping):
        return [f"{where} must be a mapping"]
    problems = [f"{where}: unknown key '{k}'" for k in sorted(set(rule) - set(keys))]
    peers = sorted(set(rule) & set(l3))
    if len(peers) > 1:
        problems.append(f"{where} mixes {', '.join(peers)}: use one L3 peer kind per rule")
    for key in ("toEndpoints", "fromEndpoints"):
        for index, selector in enumerate(rule.get(key, [])):
            problems += _selector(selector, f"{where}.{key}[{index}]")
    for index, fqdn in enumerate(rule.get("toFQDNs", [])):
        problems += _fqdn(fqdn, f"{where}.toFQDNs[{index}]")
    to_ports = rule.get("toPorts", [])
    if not isinstance(to_ports, list):
        return [*problems, f"{where}.toPorts must be a list"]
    for index, entry in enumerate(to_ports):
        problems += _to_ports(entry, f"{where}.toPorts[{index}]")
    return problems


def _fqdn(entry: object, where: str) -> list[str]:
    if not isinstance(entry, Mapping) or len(set(entry) & {"matchName", "matchPattern"}) != 1 or len(entry) != 1:
        return [f"{where} needs exactly one of matchName and matchPattern"]
    value = next(iter(entry.values()))
    return [] if isinstance(value, str) and value else [f"{where} must be a non-empty string"]


def _to_ports(entry: object, where: str) -> list[str]:
    if not isinstance(entry, Mapping):
        return [f"{where} must be a mapping"]
    problems = [f"{where}: unknown key '{k}'" for k in sorted(set(entry) - {"ports", "rules", "terminatingTLS"})]
    for index, port in enumerate(entry.get("ports", [])):
        at = f"{where}.ports[{index}]"
        if not isinstance(port, Mapping):
            problems.append(f"{at} must be a mapping")
            continue
        value = port.get("port")
        if not isinstance(value, str) or not value.isdigit() or not 1 <= int(value) <= 65535:
            problems.append(f'{at}.port must be a quoted port number, like "443" (got {value!r})')
        if port.get("protocol", "ANY") not in _PROTOCOLS:
            problems.append(f"{at}.protocol {port.get('protocol')!r} is not one of {', '.join(sorted(_PROTOCOLS))}")
    rules = entry.get("rules", {})
    if not isinstance(rules, Mapping):
        return [*problems, f"{where}.rules must be a mapping"]
    for index, dns in enumerate(rules.get("dns", [])):
        problems += _fqdn(dns, f"{where}.rules.dns[{index}]")
    return problems


def _is_dns_rule(rule: object) -> bool:
    if not isinstance(rule, Mapping):
        return False
    for entry in rule.get("toPorts", []):
        if not isinstance(entry, Mapping):
            continue
        ports = [p.get("port") for p in entry.get("ports", []) if isinstance(p, Mapping)]
        rules = entry.get("rules")
        if "53" in ports and isinstance(rules, Mapping) and rules.get("dns"):
            return True
    return False
