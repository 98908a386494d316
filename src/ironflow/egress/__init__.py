"""Egress: which hosts a sandbox may reach, as a value the proxy, the CLI and the manifests share (pure).

:mod:`.addresses` reads IP literals as the kernel does and names the fixed deny set;
:mod:`.host_rules` holds one rule and its spellings; :mod:`.policy` the policy and the decision
(its docstring carries the rule table);
:mod:`.profiles` the named profiles; :mod:`.options` builds a policy from a command's options.
No module here resolves a name or opens a socket: the egress proxy (``ironflow.auth_proxy``)
does, and asks these functions before and after.
"""

from ironflow.egress.addresses import IPAddress, IPNetwork, ends_in_number, fixed_deny, parse_ip_literal
from ironflow.egress.options import policy_from_options
from ironflow.egress.policy import (
    DEFAULT_PORTS,
    Decision,
    EgressPolicy,
    InvalidEgressPolicy,
    Rule,
    decide,
    decide_address,
    decide_address_remembered,
    decide_remembered,
    parse_allow_host,
)
from ironflow.egress.profiles import PROFILES, profile

__all__ = [
    "DEFAULT_PORTS",
    "PROFILES",
    "Decision",
    "EgressPolicy",
    "IPAddress",
    "IPNetwork",
    "InvalidEgressPolicy",
    "Rule",
    "decide",
    "decide_address",
    "decide_address_remembered",
    "decide_remembered",
    "ends_in_number",
    "fixed_deny",
    "parse_allow_host",
    "parse_ip_literal",
    "policy_from_options",
    "profile",
]
