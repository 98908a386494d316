"""Relays: hosts a step reaches through the auth proxy with a credential the proxy injects (pure).

A relay is one host, one credential and how it is injected (Bearer, Basic, a custom header
or a query parameter), and the requests it may make (methods, path prefixes). The credential
is a proxied secret (:class:`~ironflow.auth_proxy.tokens.SecretCredential`) for that one host;
the sandbox only ever holds the opaque ``ifap_`` token of its grant. A git host of a workspace
is one relay (:class:`~ironflow.auth_proxy.git_hosts.GitHosts` builds its secret here).

**One token per relay.** A grant keeps exactly one credential (registries, revocation, metrics
and logs stay as they are); a step with three relays gets three tokens from the same proxy, each
reaching only its host. The sandbox sees, per relay named ``NAME``::

    IRONFLOW_RELAY_<NAME>=http://127.0.0.1:<port>/r/<host>     # the relay's base URL
    IRONFLOW_RELAY_<NAME>_TOKEN=ifap_…                          # send as Bearer (or any accepted header)

A provider file lists them under ``relays:``; the credential's value never is in the file, only
where it comes from: ``credential_env`` (a worker variable, local backends) or
``credential_secret: {secret, key}`` (a Kubernetes Secret). This module never reads either.

>>> spec = RelaySpec("example", "api.example.com", tokens.Injection("bearer"), credential_env="EXAMPLE_TOKEN")
>>> sorted(relay_env([(spec, "ifap_x")], "http://127.0.0.1:18080"))
['IRONFLOW_RELAY_EXAMPLE', 'IRONFLOW_RELAY_EXAMPLE_TOKEN']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from ironflow import errors
from ironflow.auth_proxy import tokens
from ironflow.secrets import Secret
from ironflow.settings_file import Section

__all__ = [
    "ENV_PREFIX",
    "RELAY_KEYS",
    "Relay",
    "RelaySpec",
    "SecretRef",
    "clash",
    "env_suffix",
    "parse_relays",
    "relay_env",
    "resolve_env",
]

#: The sandbox variables of a relay start so (its URL; ``…_TOKEN`` its opaque token).
ENV_PREFIX: Final = "IRONFLOW_RELAY_"
#: The keys of one ``relays:`` entry in a provider file.
RELAY_KEYS: Final = ("name", "host", "credential_env", "credential_secret", "injection", "scope")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_suffix(name: str) -> str:
    """A relay name as the tail of a variable name: upper case, every other char ``_``.

    >>> env_suffix("api.example-1.com")
    'API_EXAMPLE_1_COM'
    """
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


@dataclass(frozen=True)
class SecretRef:
    """A key of a Kubernetes Secret in the worker's namespace: where a relay's value is kept."""

    secret: str
    key: str


@dataclass(frozen=True)
class RelaySpec:
    """A relay as configured: host, injection, scope, and where its value comes from (not the value)."""

    name: str
    host: str
    injection: tokens.Injection
    scope: tokens.Scope = field(default_factory=tokens.Scope)
    credential_env: str | None = None
    credential_secret: SecretRef | None = None

    @property
    def env_name(self) -> str:
        """The sandbox variable holding the relay's URL (``…_TOKEN``: its token)."""
        return ENV_PREFIX + env_suffix(self.name)

    def with_value(self, value: Secret) -> Relay:
        return Relay(self, value)


@dataclass(frozen=True)
class Relay:
    """A relay with its credential's value; its repr shows no value."""

    spec: RelaySpec
    value: Secret = field(repr=False)

    def secret(self) -> tokens.SecretCredential:
        """The proxied secret a token for this relay stands for: its one host, its scope."""
        s = self.spec
        return tokens.SecretCredential(s.name, self.value, s.injection, (s.host,), s.scope)


def _wire(item: Section, key: str) -> object:
    """The raw value at ``key`` (the token request's wire form is checked by :mod:`tokens`)."""
    return item.data[key] if item.has(key) else None


def _parse_one(item: Section, source: Literal["env", "secret"]) -> RelaySpec:
    item.require("host", "injection")
    try:
        host = tokens.validate_host_pattern(item.text("host"))
    except tokens.InvalidTokenRequest as exc:
        raise item.error("host", exc.message) from None
    if host.startswith("*."):
        raise item.error("host", "a relay names one host, not a pattern")
    name = item.optional_text("name") or host
    if not _NAME.fullmatch(name):
        raise item.error("name", "use 1 to 64 of [A-Za-z0-9_.-]")
    try:
        injection = tokens.parse_injection(_wire(item, "injection"))
    except tokens.InvalidTokenRequest as exc:
        raise item.error("injection", exc.message.removeprefix("invalid secret injection: ")) from None
    try:
        scope = tokens.parse_scope(_wire(item, "scope"))
    except tokens.InvalidTokenRequest as exc:
        raise item.error("scope", exc.message.removeprefix("invalid secret scope: ")) from None
    env: str | None = None
    ref: SecretRef | None = None
    if source == "env":
        if item.has("credential_secret"):
            raise item.error("credential_secret", "is for Kubernetes providers; here give credential_env: VARIABLE")
        item.require("credential_env")
        env = item.text("credential_env")
        if not _ENV_NAME.fullmatch(env):
            raise item.error("credential_env", "must be a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    else:
        if item.has("credential_env"):
            raise item.error(
                "credential_env", "a pod's worker reads no variable for it; give credential_secret: {secret, key}"
            )
        item.require("credential_secret")
        ref_section = item.section("credential_secret", ("secret", "key"))
        ref_section.require("secret", "key")
        ref = SecretRef(ref_section.text("secret"), ref_section.text("key"))
    return RelaySpec(name, host, injection, scope, credential_env=env, credential_secret=ref)


def parse_relays(top: Section, source: Literal["env", "secret"], key: str = "relays") -> tuple[RelaySpec, ...]:
    """The ``relays:`` list of a provider file; ``source`` says where values come from
    (``env``: ``credential_env``, local backends; ``secret``: ``credential_secret``, Kubernetes).

    Raises:
        ConfigError: naming the key path; two relays with one name or one host.
    """
    if not top.has(key):
        return ()
    specs = tuple(_parse_one(item, source) for item in top.items(key, RELAY_KEYS))
    found = clash(specs)
    if found is not None:
        index, field_name, problem = found
        raise errors.ConfigError(f"{top.key_path(key)}[{index}].{field_name}: {problem}")
    return specs


def clash(specs: Iterable[RelaySpec]) -> tuple[int, str, str] | None:
    """The first relay whose variables or host another relay already has: its index, the key, why."""
    names: set[str] = set()
    hosts: set[str] = set()
    for index, spec in enumerate(specs):
        if env_suffix(spec.name) in names:
            return index, "name", f"another relay has the name {spec.name!r} (or one like it)"
        if spec.host in hosts:
            return index, "host", f"another relay has the host {spec.host!r}"
        names.add(env_suffix(spec.name))
        hosts.add(spec.host)
    return None


def resolve_env(specs: Iterable[RelaySpec], environ: Mapping[str, str]) -> tuple[Relay, ...]:
    """Each ``credential_env`` relay with its value from ``environ`` (the worker's environment).

    Raises:
        MissingCredential: a variable is unset or empty (named; its value never is).
    """
    out: list[Relay] = []
    for spec in specs:
        if spec.credential_env is None:
            raise errors.ConfigError(f"relay {spec.name!r} takes its credential from a Kubernetes Secret")
        value = environ.get(spec.credential_env, "")
        if not value:
            raise errors.MissingCredential(
                f"relay {spec.name!r} ({spec.host}) needs its credential in {spec.credential_env}; "
                "set it for the worker"
            )
        if not tokens.is_header_safe(value):
            raise errors.ConfigError(
                f"relay {spec.name!r}: {spec.credential_env} holds characters a request cannot carry"
            )
        out.append(spec.with_value(Secret(value)))
    return tuple(out)


def relay_env(issued: Iterable[tuple[RelaySpec, str]], proxy_url: str) -> dict[str, str]:
    """The sandbox variables of each relay given its opaque token: the URL and the token."""
    out: dict[str, str] = {}
    for spec, token in issued:
        out[spec.env_name] = f"{proxy_url.rstrip('/')}/r/{spec.host}"
        out[spec.env_name + "_TOKEN"] = token
    return out
