"""A policy from what a user gives on the command line, and the destination a URL asks for (pure).

Every command that takes a policy (``exec``, ``agent``, ``sandbox open``, ``egress check``)
builds it here from the same options, in one order: the ``--egress`` files (YAML or JSON, the
wire form of :mod:`.policy`), then the ``--egress-profile`` names, then the ``--allow-host``
rules, each rule kept once. A provider or step file's ``egress:`` and ``egress_profiles:`` are
read by :func:`file_policy`. The caller reads the files; this module only parses text.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from ironflow import errors, settings_file
from ironflow.egress import policy
from ironflow.egress import profiles as named

__all__ = ["Target", "file_policy", "policy_from_options", "target"]


def policy_from_options(
    allow_hosts: Sequence[str] = (),
    profiles: Sequence[str] = (),
    files_contents: Sequence[tuple[str, str]] = (),
    extra_profiles: Mapping[str, policy.EgressPolicy] = MappingProxyType({}),
) -> policy.EgressPolicy:
    """The policy of ``--allow-host`` rules, ``--egress-profile`` names and ``--egress`` files
    (``(source, text)`` pairs, ``source`` naming the file in errors); nothing given is deny-all.
    ``extra_profiles`` are a provider file's own (``egress_profiles:``).

    Raises:
        InvalidEgressPolicy: one line naming the option or the file and the entry.
    """
    found = policy.EgressPolicy()
    for source, text in files_contents:
        try:
            raw = settings_file.decode(text, source=source)
            found = found.merged(named.from_json(raw, extra_profiles))
        except policy.InvalidEgressPolicy as exc:
            raise policy.InvalidEgressPolicy(f"{source}: {exc.message}") from None
        except errors.ConfigError as exc:
            raise policy.InvalidEgressPolicy(exc.message) from None
    for name in profiles:
        found = found.merged(named.profile(name, extra_profiles))
    rules = []
    for text in allow_hosts:
        try:
            rules.append(policy.parse_allow_host(text))
        except policy.InvalidEgressPolicy as exc:
            raise policy.InvalidEgressPolicy(f"--allow-host: {exc.message}") from None
    return found.merged(policy.EgressPolicy(allow=tuple(rules)))


#: A file's own profile name: a DNS label, so it reads the same in a file, a flag and a log line.
_PROFILE_NAME: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def file_policy(
    egress: object, egress_profiles: object = None, *, source: str
) -> tuple[policy.EgressPolicy, Mapping[str, policy.EgressPolicy]]:
    """A provider or step file's ``egress:`` (the wire form) and ``egress_profiles:`` (name → the
    wire form), read together: ``egress:`` may name the file's own profiles, a file profile may
    name built-in ones (never another file profile: no cycles). ``source`` names the file in errors.

    Raises:
        InvalidEgressPolicy: one line naming the file, the key and the entry.
    """
    if egress_profiles is None:
        egress_profiles = {}
    if not isinstance(egress_profiles, Mapping):
        raise policy.InvalidEgressPolicy(f"{source}: egress_profiles is a mapping of profile name to policy")
    own: dict[str, policy.EgressPolicy] = {}
    for name, raw in egress_profiles.items():
        if not isinstance(name, str) or not _PROFILE_NAME.fullmatch(name):
            raise policy.InvalidEgressPolicy(
                f"{source}: egress_profiles: invalid profile name {str(name)[:100]!r}: use a-z, 0-9 and '-'"
            )
        try:
            own[name] = named.from_json(raw)
        except policy.InvalidEgressPolicy as exc:
            raise policy.InvalidEgressPolicy(f"{source}: egress_profiles.{name}: {exc.message}") from None
    try:
        found = named.from_json(egress, own)
    except policy.InvalidEgressPolicy as exc:
        raise policy.InvalidEgressPolicy(f"{source}: egress: {exc.message}") from None
    return found, MappingProxyType(own)


@dataclass(frozen=True)
class Target:
    """What a URL asks the egress proxy for: a ``CONNECT`` (``method`` None) or a plain-HTTP request."""

    host: str
    port: int
    method: str | None = None
    path: str | None = None


def target(url: str, *, method: str = "GET") -> Target:
    """The destination of ``https://HOST[:PORT]/…`` (a ``CONNECT``: the path is inside the tunnel),
    ``http://HOST[:PORT]/PATH`` (``method`` and the path are seen) or ``HOST:PORT`` (a ``CONNECT``).

    Raises:
        InvalidEgressPolicy: one line when it is none of these.
    """
    shown = "" if "@" in url else f" {url[:200]!r}"
    if "://" not in url:
        host, colon, port_text = url.rpartition(":")
        if not colon or not host or not port_text.isdigit() or not 0 < int(port_text[:6]) < 65536:
            raise policy.InvalidEgressPolicy(
                f"invalid destination{shown}: expected https://HOST/…, http://HOST/… or HOST:PORT (1-65535)"
            )
        return Target(host.removeprefix("[").removesuffix("]"), int(port_text))
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise policy.InvalidEgressPolicy(f"invalid URL{shown}: {str(exc).split(';')[0][:80]}") from None
    if parts.scheme not in ("http", "https"):
        raise policy.InvalidEgressPolicy(f"invalid URL{shown}: the scheme must be http or https")
    if parts.username is not None or parts.password is not None:
        raise policy.InvalidEgressPolicy("invalid URL: a credential does not belong in it")
    if not parts.hostname or port == 0:
        raise policy.InvalidEgressPolicy(f"invalid URL{shown}: it names no host or port")
    if parts.scheme == "https":
        return Target(parts.hostname, port or 443)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.hostname, port or 80, method=method, path=path)
