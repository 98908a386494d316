"""Provider Accounts: named credentials a worker hands to steps, and their rate-limit windows.

An account is a *reference* (an env variable of the worker, or a Kubernetes Secret key),
never a value: the store keeps only account names and the rate-limit windows each
account reported (§7.4). The value is read when a step starts, wrapped in a
:class:`~ironflow.secrets.Secret`, and reaches only the provider (which hands it to the
auth proxy, never to the pod).

Choice rule (pure, :func:`choose_account`): skip accounts with a window rejected at
``now``; among the rest take the lowest peak utilization, then the fewest steps in
flight, then the name. When every account is rejected, wait until the earliest reset,
up to ``max_wait_s``, then fail with :class:`~ironflow.errors.RateLimited` naming the
accounts and their reset times. A wait's start and end go to the pool's observers.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from ironflow import errors
from ironflow.engine import events, model
from ironflow.engine.store import Store
from ironflow.kube import resources
from ironflow.secrets import Secret
from ironflow.steps import AccountLease

if TYPE_CHECKING:
    from ironflow.kube.api import KubeApi  # the client (aiohttp): the caller's; `runs list` must not load it

__all__ = [
    "AccountChoice",
    "AccountPool",
    "CredentialRef",
    "KubeSecretReader",
    "ProviderAccount",
    "SecretReader",
    "choose_account",
    "parse_account",
    "window_from_claude",
]

#: Env names the CLI reads, by credential kind.
_ENV_NAMES: Final = {"oauth_token": "CLAUDE_CODE_OAUTH_TOKEN", "api_key": "ANTHROPIC_API_KEY"}

#: Reads one key of a Kubernetes Secret: ``(namespace, name, key) -> value``.
SecretReader = Callable[[str | None, str, str], Awaitable[str]]


@dataclass(frozen=True)
class CredentialRef:
    """Where a credential lives: exactly one of ``env`` or ``secret`` + ``key``."""

    env: str | None = None
    secret: str | None = None
    key: str | None = None
    namespace: str | None = None

    def __post_init__(self) -> None:
        if (self.env is None) == (self.secret is None):
            raise errors.ConfigError("a credential reference needs exactly one of env=NAME or secret=NAME with key=KEY")
        if self.secret is not None and not self.key:
            raise errors.ConfigError(f"credential from Secret {self.secret!r} needs key=KEY")

    def describe(self) -> str:
        if self.env is not None:
            return f"env variable {self.env}"
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"Secret {ns}{self.secret} key {self.key}"


@dataclass(frozen=True)
class ProviderAccount:
    """A named Claude credential; ``kind`` picks the env name the CLI reads."""

    name: str
    credential: CredentialRef
    kind: Literal["oauth_token", "api_key"] = "oauth_token"

    def __post_init__(self) -> None:
        if not self.name:
            raise errors.ConfigError("a provider account needs a non-empty name")
        if self.kind not in _ENV_NAMES:
            raise errors.ConfigError(f"account kind must be one of {', '.join(_ENV_NAMES)}, got {self.kind!r}")

    @property
    def env_name(self) -> str:
        return _ENV_NAMES[self.kind]


_ACCOUNT_FORMS: Final = "NAME=env:VAR or NAME=secret:[NAMESPACE/]SECRET/KEY, optionally followed by ,kind=api_key"


def parse_account(spec: str) -> ProviderAccount:
    """An account from its command-line form (see ``_ACCOUNT_FORMS``); the value is never in it.

    >>> parse_account("main=env:CLAUDE_TOKEN_MAIN").credential.env
    'CLAUDE_TOKEN_MAIN'
    >>> parse_account("ci=secret:ironflow/claude/token,kind=api_key").credential.describe()
    'Secret ironflow/claude key token'
    """
    body, _, options = spec.partition(",")
    name, eq, source = body.partition("=")
    kind = "oauth_token"
    if options:
        key, _, value = options.partition("=")
        if key != "kind" or value not in _ENV_NAMES:
            raise errors.ConfigError(f"account {spec!r}: unknown option {options!r}; use {_ACCOUNT_FORMS}")
        kind = value
    where, colon, ref = source.partition(":")
    if not eq or not name or not colon or not ref:
        raise errors.ConfigError(f"account {spec!r} must look like {_ACCOUNT_FORMS}")
    if where == "env":
        credential = CredentialRef(env=ref)
    elif where == "secret":
        parts = ref.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise errors.ConfigError(f"account {spec!r}: a Secret reference is [NAMESPACE/]SECRET/KEY")
        namespace = parts[0] if len(parts) == 3 else None
        credential = CredentialRef(secret=parts[-2], key=parts[-1], namespace=namespace)
    else:
        raise errors.ConfigError(f"account {spec!r}: the source must be env: or secret:, got {where!r}")
    return ProviderAccount(name, credential, kind)  # type: ignore[arg-type]


@dataclass(frozen=True)
class AccountChoice:
    """An account to use now, or (``account`` None) how long to wait for one."""

    account: ProviderAccount | None
    wait_until: float | None = None
    reason: str = ""


def _fmt_time(ts: float | None) -> str:
    if ts is None:
        return "an unknown time"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def choose_account(
    accounts: Sequence[ProviderAccount],
    windows: Iterable[model.RateWindow],
    now: float,
    *,
    in_use: Mapping[str, int] | None = None,
) -> AccountChoice:
    """Pick an account not in a rejected window at ``now`` (see the module rule)."""
    if not accounts:
        raise errors.ConfigError("no provider accounts configured; add one with an env or Secret reference")
    by_account: dict[str, list[model.RateWindow]] = {}
    for w in windows:
        by_account.setdefault(w.account, []).append(w)
    in_use = in_use or {}
    free: list[tuple[float, int, str, ProviderAccount]] = []
    blocked: list[tuple[str, float | None]] = []
    for account in accounts:
        mine = by_account.get(account.name, [])
        rejecting = [w for w in mine if w.rejects(now)]
        if rejecting:
            resets = [w.resets_at for w in rejecting]
            blocked.append((account.name, None if None in resets else max(r for r in resets if r is not None)))
            continue
        current = [w for w in mine if w.resets_at is None or w.resets_at > now]  # a reset window starts empty
        peak = max((w.utilization for w in current), default=0.0)
        free.append((peak, in_use.get(account.name, 0), account.name, account))
    if free:
        return AccountChoice(min(free, key=lambda t: t[:3])[3])
    known = [r for _, r in blocked if r is not None]
    wait_until = min(known) if known else None
    reason = "; ".join(f"{name} rejected until {_fmt_time(r)}" for name, r in blocked)
    return AccountChoice(None, wait_until, reason)


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


def window_from_claude(account: str, window: Any, now: float) -> model.RateWindow | None:
    """A ``claude.rate_limits.RateLimitWindow`` (or a look-alike) as a stored window."""
    try:
        status = model.WindowStatus(getattr(window, "status", ""))
    except ValueError:
        return None
    return model.RateWindow(
        account=account,
        window=str(window.window),
        status=status,
        utilization=float(getattr(window, "utilization", 0.0) or 0.0),
        scope=getattr(window, "model_scope", None) or "",
        resets_at=_timestamp(getattr(window, "resets_at", None)),
        recorded_at=now,
    )


class KubeSecretReader:
    """Reads an account's credential from a Kubernetes Secret when a step starts.

    Errors name the Secret and the key, never the value; a missing Secret or key is a
    step configuration error (a retry cannot help), an API failure keeps its own class.
    """

    def __init__(self, api: KubeApi, *, default_namespace: str = "default") -> None:
        self.api = api
        self.default_namespace = default_namespace

    async def __call__(self, namespace: str | None, name: str, key: str) -> str:
        ns = namespace or self.default_namespace
        secrets = resources.Resource("", "v1", "secrets", "Secret")
        try:
            obj = await self.api.get(secrets, ns, name)
        except errors.KubeNotFound:
            raise errors.StepConfigError(f"Secret {ns}/{name} not found; create it or fix the account") from None
        encoded = (obj.get("data") or {}).get(key)
        if encoded is None:
            raise errors.StepConfigError(f"Secret {ns}/{name} has no key {key!r}; fix the account's key")
        try:
            return base64.b64decode(encoded, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise errors.StepConfigError(f"Secret {ns}/{name} key {key!r} is not base64 UTF-8 text") from None


class _Recorder:
    """The ``RateLimitRecorder`` one step's lease carries; windows are stored on release."""

    def __init__(self, account: str, clock: Callable[[], float]) -> None:
        self.account = account
        self.clock = clock
        self.windows: list[model.RateWindow] = []

    def record(self, windows: Iterable[Any]) -> None:
        now = self.clock()
        for w in windows:
            converted = window_from_claude(self.account, w, now)
            if converted is not None:
                self.windows.append(converted)


class AccountPool:
    """Hands accounts to steps, reading credentials at the last moment, recording windows."""

    def __init__(
        self,
        store: Store,
        accounts: Sequence[ProviderAccount],
        *,
        secret_reader: SecretReader | None = None,
        max_wait_s: float = 300.0,
        poll_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        observers: Sequence[events.Observer] = (),
    ) -> None:
        names = [a.name for a in accounts]
        if len(set(names)) != len(names):
            raise errors.ConfigError(f"provider account names must be unique, got {names}")
        if not accounts:
            raise errors.ConfigError("an account pool needs at least one provider account")
        self.store = store
        self.accounts = tuple(accounts)
        self.secret_reader = secret_reader
        self.max_wait_s = max_wait_s
        self.poll_s = poll_s
        self.clock = clock
        self.observers = tuple(observers)
        self._in_use: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"AccountPool(accounts={[a.name for a in self.accounts]})"

    async def _credential(self, account: ProviderAccount) -> Secret:
        ref = account.credential
        if ref.env is not None:
            value = os.environ.get(ref.env, "")
            if not value:
                raise errors.StepConfigError(
                    f"provider account {account.name!r}: {ref.describe()} is not set on this worker"
                )
            return Secret(value)
        if self.secret_reader is None:
            raise errors.StepConfigError(
                f"provider account {account.name!r} reads {ref.describe()}, but this worker has no "
                "Kubernetes Secret reader; use an env reference or run the worker with --backend k8s"
            )
        assert ref.secret is not None
        assert ref.key is not None
        value = await self.secret_reader(ref.namespace, ref.secret, ref.key)
        if not value:
            raise errors.StepConfigError(f"provider account {account.name!r}: {ref.describe()} is empty")
        return Secret(value)

    async def acquire(self, step: str) -> AccountLease:
        """A lease on an account for ``step``; waits out rejected windows up to ``max_wait_s``.

        Raises:
            RateLimited: every account stays rejected past the wait limit.
        """
        started = self.clock()
        waiting = acquired = False  # a wait told to the observers is told how it ends, however it ends
        try:
            while True:
                now = self.clock()
                choice = choose_account(self.accounts, await self.store.rate_limits(), now, in_use=self._in_use)
                if choice.account is not None:
                    account = choice.account
                    value = await self._credential(account)
                    self._in_use[account.name] += 1
                    acquired = True
                    return AccountLease(account.name, account.env_name, value, _Recorder(account.name, self.clock))
                waited = now - started
                remaining = self.max_wait_s - waited
                wait = (choice.wait_until - now) if choice.wait_until is not None else self.poll_s
                if remaining <= 0 or wait > remaining:
                    raise errors.RateLimited(
                        f"step {step!r} has no provider account to run on: {choice.reason}; waited {waited:.0f}s "
                        f"of at most {self.max_wait_s:.0f}s. Add an account or raise the capacity wait",
                        retry_after_s=max(choice.wait_until - now, 0.0) if choice.wait_until is not None else None,
                    )
                if not waiting and self.observers:
                    events.notify(self.observers, events.CapacityWaitStarted(step, choice.reason))
                    waiting = True
                await asyncio.sleep(max(min(wait, self.poll_s), 0.01))
        finally:
            if waiting:
                ended = events.CapacityWaitEnded(step, self.clock() - started, acquired=acquired)
                events.notify(self.observers, ended)

    async def release(self, lease: AccountLease) -> None:
        """Store the windows the step reported and free the account."""
        self._in_use[lease.account_id] -= 1
        recorder = lease.recorder
        if isinstance(recorder, _Recorder) and recorder.windows:
            await self.store.record_rate_limits(recorder.windows)
            recorder.windows.clear()
