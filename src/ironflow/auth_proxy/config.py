"""The proxy's configuration: a frozen value, and its parsing from the environment (pure).

``AuthProxyConfig.from_env`` reads the variables of §6.1 plus
``IRONFLOW_AUTH_PROXY_UPSTREAM`` and the limits that keep a replica up under hostile
clients (connection cap, header and idle timeouts, request-body budget); every refusal
is a :class:`~ironflow.errors.ConfigError` naming the variable and the fix. The admin
key, the database URL and the key ring are held redacted: ``repr(config)`` shows the
upstream and the listen address, never a secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from ironflow.auth_proxy import crypto, policy
from ironflow.errors import ConfigError
from ironflow.secrets import Secret

if TYPE_CHECKING:
    from ironflow.auth_proxy.registry import GrantRegistry

__all__ = [
    "ADMIN_KEY_ENV",
    "BODY_BUDGET_ENV",
    "CLIENT_IDLE_TIMEOUT_ENV",
    "DATABASE_URL_ENV",
    "DEFAULT_MAX_BUFFERED_BYTES",
    "DEFAULT_UPSTREAM",
    "EGRESS_IDLE_TIMEOUT_ENV",
    "EGRESS_LISTEN_ENV",
    "EGRESS_MAX_BYTES_ENV",
    "EGRESS_MAX_TUNNELS_ENV",
    "HEADER_TIMEOUT_ENV",
    "HUB_ENV",
    "LISTEN_ENV",
    "MAX_CONNECTIONS_ENV",
    "MIN_ADMIN_KEY_CHARS",
    "SECRET_ACTIVE_KEY_VERSION_ENV",
    "SECRET_KEYS_ENV",
    "SECRET_KEY_ENV",
    "UPSTREAM_ENV",
    "AuthProxyConfig",
    "parse_listen",
    "registry_from_env",
]

ADMIN_KEY_ENV: Final = "IRONFLOW_AUTH_PROXY_ADMIN_KEY"
LISTEN_ENV: Final = "IRONFLOW_AUTH_PROXY_LISTEN"
DATABASE_URL_ENV: Final = "IRONFLOW_AUTH_PROXY_DATABASE_URL"
UPSTREAM_ENV: Final = "IRONFLOW_AUTH_PROXY_UPSTREAM"
METRICS_ENV: Final = "IRONFLOW_AUTH_PROXY_METRICS"
SECRET_KEYS_ENV: Final = "IRONFLOW_SECRET_KEYS"  # noqa: S105 - a variable name
SECRET_ACTIVE_KEY_VERSION_ENV: Final = "IRONFLOW_SECRET_ACTIVE_KEY_VERSION"  # noqa: S105 - a variable name
SECRET_KEY_ENV: Final = "IRONFLOW_SECRET_KEY"  # noqa: S105 - a variable name
LOG_ENV: Final = "RUST_LOG"
MAX_CONNECTIONS_ENV: Final = "IRONFLOW_AUTH_PROXY_MAX_CONNECTIONS"
HEADER_TIMEOUT_ENV: Final = "IRONFLOW_AUTH_PROXY_HEADER_TIMEOUT_S"
CLIENT_IDLE_TIMEOUT_ENV: Final = "IRONFLOW_AUTH_PROXY_CLIENT_IDLE_TIMEOUT_S"
BODY_BUDGET_ENV: Final = "IRONFLOW_AUTH_PROXY_MAX_BUFFERED_BYTES"
#: Request bodies held at once, over all connections: 2 × the largest body, well inside
#: the shipped 256Mi memory limit (a body is briefly held twice while it is joined).
DEFAULT_MAX_BUFFERED_BYTES: Final = 2 * policy.DEFAULT_MAX_BODY_BYTES
EGRESS_LISTEN_ENV: Final = "IRONFLOW_AUTH_PROXY_EGRESS_LISTEN"
EGRESS_MAX_TUNNELS_ENV: Final = "IRONFLOW_AUTH_PROXY_EGRESS_MAX_TUNNELS"
EGRESS_MAX_BYTES_ENV: Final = "IRONFLOW_AUTH_PROXY_EGRESS_MAX_BYTES"
EGRESS_IDLE_TIMEOUT_ENV: Final = "IRONFLOW_AUTH_PROXY_EGRESS_IDLE_TIMEOUT_S"
#: Per token: tunnels open at once, bytes over its life (both directions), a silent tunnel's end.
DEFAULT_EGRESS_MAX_TUNNELS: Final = 64
DEFAULT_EGRESS_MAX_BYTES: Final = 16 << 30
DEFAULT_EGRESS_IDLE_TIMEOUT_S: Final = 300.0
#: Set by ``--workers N`` for its workers; not for operators.
HUB_ENV: Final = "IRONFLOW_AUTH_PROXY_HUB"
DEFAULT_UPSTREAM: Final = "https://api.anthropic.com"
MIN_ADMIN_KEY_CHARS: Final = 32
_NO_KEY_RING: Final = (
    "IRONFLOW_AUTH_PROXY_DATABASE_URL is set but no encryption key is configured: "
    "set IRONFLOW_SECRET_KEYS (or IRONFLOW_SECRET_KEY)"
)


def parse_listen(value: str, variable: str = LISTEN_ENV) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) into a pair; ConfigError names the variable."""
    host, sep, port_text = value.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"{variable} must be host:port, e.g. 0.0.0.0:8080 (got {value[:100]!r})")
    return host, int(port_text)


@dataclass(frozen=True)
class AuthProxyConfig:
    """Everything the server needs; build it directly in tests or with :meth:`from_env`.

    ``registry`` lets an embedding process (the local sandbox provider, tests with
    replicas) share one registry object between app instances; when it is ``None`` the
    app builds one from ``database_url`` (PostgreSQL) or in memory.
    """

    admin_key: Secret
    host: str = "0.0.0.0"
    port: int = 8080
    upstream: str = DEFAULT_UPSTREAM
    database_url: Secret | None = None
    key_ring: crypto.KeyRing | None = field(default=None, repr=False)
    max_body_bytes: int = policy.DEFAULT_MAX_BODY_BYTES
    #: Bytes of request bodies buffered at once over all requests; past it a 503.
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    #: Open client connections at once; ``None``: half the file descriptors left (each
    #: relayed connection holds a second one upstream). Past it a 503 and close.
    max_connections: int | None = None
    #: A connection must deliver a request's headers this long after its first byte
    #: (a new connection: after it opens), else it is closed: slowloris.
    header_timeout_s: float = 10.0
    #: A keep-alive connection with no request for this long is closed.
    client_idle_timeout_s: float = 60.0
    #: A request body that delivers nothing for this long is answered 408.
    body_read_timeout_s: float = 30.0
    #: A limited token's stream whose client left is read on (not relayed) this long at
    #: most, for the usage its ``message_delta`` reports.
    usage_drain_timeout_s: float = 30.0
    metrics_enabled: bool = True
    log_level: str = "info"
    #: No total timeout on a stream; a read silent this long ends it.
    idle_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    purge_interval_s: float = 60.0
    #: How long a replica trusts a cached grant without revocation news (PostgreSQL only).
    token_cache_ttl_s: float = 30.0
    #: The PostgreSQL revocation link is pinged this often; a ping unanswered as long drops the cache.
    listen_keepalive_s: float = 2.0
    warnings: tuple[str, ...] = ()
    #: Unix socket of the parent's registry hub (``--workers N`` without a database).
    hub_socket: str | None = None
    #: Tests only: send ``/r/<host>/…`` to ``<secret_upstream>/<host>/…`` instead of ``https://<host>/…``.
    secret_upstream: str | None = None
    registry: GrantRegistry | None = field(default=None, repr=False, compare=False)
    #: The egress proxy's listener (:mod:`egress_server`): ``host:port`` (port 0: a free one), or
    #: ``None`` for none; ``egress_socket`` serves it on a unix socket instead.
    egress_host: str = "0.0.0.0"
    egress_port: int | None = None
    egress_socket: str | None = None
    egress_max_tunnels: int = DEFAULT_EGRESS_MAX_TUNNELS
    egress_max_bytes: int | None = DEFAULT_EGRESS_MAX_BYTES
    egress_idle_timeout_s: float = DEFAULT_EGRESS_IDLE_TIMEOUT_S

    @property
    def egress_enabled(self) -> bool:
        return self.egress_port is not None or self.egress_socket is not None

    def __post_init__(self) -> None:
        key = self.admin_key.reveal() if isinstance(self.admin_key, Secret) else str(self.admin_key)
        object.__setattr__(self, "admin_key", Secret(key.strip()))
        if len(self.admin_key) < MIN_ADMIN_KEY_CHARS:
            raise ConfigError(
                f"{ADMIN_KEY_ENV} must be at least {MIN_ADMIN_KEY_CHARS} characters "
                f"(got {len(self.admin_key)}): generate one with `openssl rand -hex 32`"
            )
        if not self.upstream.startswith(("http://", "https://")):
            raise ConfigError(f"{UPSTREAM_ENV} must be an http(s) URL (got {self.upstream[:100]!r})")
        object.__setattr__(self, "upstream", self.upstream.rstrip("/"))
        if self.secret_upstream is not None:
            object.__setattr__(self, "secret_upstream", self.secret_upstream.rstrip("/"))
        if self.database_url is not None and self.key_ring is None:
            raise ConfigError(_NO_KEY_RING)
        if self.max_buffered_bytes < self.max_body_bytes:
            raise ConfigError(
                f"{BODY_BUDGET_ENV} ({self.max_buffered_bytes}) must be at least the largest body "
                f"({self.max_body_bytes}), or no large request could ever be relayed"
            )
        if self.max_connections is not None and self.max_connections < 1:
            raise ConfigError(f"{MAX_CONNECTIONS_ENV} must be a positive integer")
        if self.egress_max_tunnels < 1:
            raise ConfigError(f"{EGRESS_MAX_TUNNELS_ENV} must be a positive integer")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AuthProxyConfig:
        """Read §6.1's variables; blank values count as unset."""
        admin_key = env.get(ADMIN_KEY_ENV, "").strip()
        if not admin_key:
            raise ConfigError(f"{ADMIN_KEY_ENV} is required: set it to a random key of at least 32 characters")
        host, port = parse_listen(env.get(LISTEN_ENV, "") or "0.0.0.0:8080")
        database_url = env.get(DATABASE_URL_ENV, "").strip()
        if database_url and not database_url.startswith(("postgres://", "postgresql://")):
            raise ConfigError(f"{DATABASE_URL_ENV} must be a postgres:// or postgresql:// URL")
        key_ring, warnings = _key_ring_from_env(env)
        if database_url and key_ring is None:
            raise ConfigError(_NO_KEY_RING)
        hub_socket = env.get(HUB_ENV, "").strip() or None
        metrics = env.get(METRICS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
        max_connections = _positive(env, MAX_CONNECTIONS_ENV, int)
        egress_listen = env.get(EGRESS_LISTEN_ENV, "").strip()
        egress_host, egress_port = parse_listen(egress_listen, EGRESS_LISTEN_ENV) if egress_listen else ("", None)
        return cls(
            admin_key=Secret(admin_key),
            host=host,
            port=port,
            upstream=env.get(UPSTREAM_ENV, "").strip() or DEFAULT_UPSTREAM,
            database_url=Secret(database_url) if database_url else None,
            key_ring=key_ring,
            metrics_enabled=metrics,
            log_level=(env.get(LOG_ENV, "").strip() or "info").lower(),
            warnings=warnings,
            hub_socket=None if database_url else hub_socket,
            max_connections=None if max_connections is None else int(max_connections),
            max_buffered_bytes=int(_positive(env, BODY_BUDGET_ENV, int) or DEFAULT_MAX_BUFFERED_BYTES),
            header_timeout_s=float(_positive(env, HEADER_TIMEOUT_ENV, float) or 10.0),
            client_idle_timeout_s=float(_positive(env, CLIENT_IDLE_TIMEOUT_ENV, float) or 60.0),
            egress_host=egress_host or "0.0.0.0",
            egress_port=egress_port,
            egress_max_tunnels=int(_positive(env, EGRESS_MAX_TUNNELS_ENV, int) or DEFAULT_EGRESS_MAX_TUNNELS),
            egress_max_bytes=int(_positive(env, EGRESS_MAX_BYTES_ENV, int) or DEFAULT_EGRESS_MAX_BYTES),
            egress_idle_timeout_s=float(
                _positive(env, EGRESS_IDLE_TIMEOUT_ENV, float) or DEFAULT_EGRESS_IDLE_TIMEOUT_S
            ),
        )


def _positive(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> int | float | None:
    """A positive number from ``name``, ``None`` when unset; ConfigError names the variable."""
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{name} must be a positive {'integer' if kind is int else 'number'} (got {text[:40]!r})")
    return value


def registry_from_env(env: Mapping[str, str]) -> tuple[Secret, crypto.KeyRing]:
    """The database URL and key ring alone (``rotate-keys``): no admin key is needed to re-seal."""
    database_url = env.get(DATABASE_URL_ENV, "").strip()
    key_ring, _ = _key_ring_from_env(env)
    if not database_url or key_ring is None:
        raise ConfigError(f"rotate-keys needs {DATABASE_URL_ENV} and {SECRET_KEYS_ENV} (or {SECRET_KEY_ENV})")
    if not database_url.startswith(("postgres://", "postgresql://")):
        raise ConfigError(f"{DATABASE_URL_ENV} must be a postgres:// or postgresql:// URL")
    return Secret(database_url), key_ring


def _key_ring_from_env(env: Mapping[str, str]) -> tuple[crypto.KeyRing | None, tuple[str, ...]]:
    active_text = env.get(SECRET_ACTIVE_KEY_VERSION_ENV, "").strip()
    active: int | None = None
    if active_text:
        if not active_text.isdigit() or int(active_text) < 1:
            raise ConfigError(f"{SECRET_ACTIVE_KEY_VERSION_ENV} must be a positive integer")
        active = int(active_text)
    spec = env.get(SECRET_KEYS_ENV, "").strip()
    legacy = env.get(SECRET_KEY_ENV, "").strip()
    warnings: tuple[str, ...] = ()
    try:
        if spec:
            if legacy:
                warnings = (f"{SECRET_KEY_ENV} is ignored because {SECRET_KEYS_ENV} is set",)
            return crypto.KeyRing.from_spec(spec, active), warnings
        if legacy:
            return crypto.KeyRing.from_legacy(legacy, active), warnings
    except crypto.KeyRingError as exc:
        variable = SECRET_KEYS_ENV if spec else SECRET_KEY_ENV
        raise ConfigError(f"{variable}: {exc}") from None
    return None, warnings
