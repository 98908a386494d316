"""The sandbox settings a step brings: env from Secrets, volumes, inputs, service account,
runtime class (pure).

Each value checks itself when it is built and names the field it refuses, so nothing invalid
reaches a renderer; what depends on the backend (a reserved mount path, a preset name) is the
backend's check, through :func:`ironflow.claude.layout.mount_path_problem`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ironflow import errors, labels

__all__ = [
    "AgentInput",
    "ConfigMapSource",
    "HostPathSource",
    "PodSettings",
    "PvcSource",
    "PvcVolume",
    "ReadOnlyVolume",
    "SecretEnvVar",
    "VolumeSource",
    "is_env_name",
    "validate_sub_path",
]

_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET_KEY: Final = re.compile(r"[-._a-zA-Z0-9]+")


def is_env_name(name: str) -> bool:
    """What a container env var name may be: ``[A-Za-z_][A-Za-z0-9_]*`` (the one rule, for every backend)."""
    return _ENV_NAME.fullmatch(name) is not None


def _require_dns_subdomain(field_name: str, value: str) -> None:
    if not isinstance(value, str) or not labels.is_dns_subdomain(value):
        raise errors.ConfigError(
            f"{field_name} must be a Kubernetes object name (lowercase DNS subdomain, 1-253 characters), got {value!r}"
        )


@dataclass(frozen=True)
class SecretEnvVar:
    """An env variable read from a Kubernetes Secret: the pod spec holds only the reference."""

    name: str
    secret: str
    key: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not is_env_name(self.name):
            raise errors.ConfigError(f"secret_env name must be an environment variable name, got {self.name!r}")
        _require_dns_subdomain(f"secret_env {self.name}: secret", self.secret)
        if not isinstance(self.key, str) or not _SECRET_KEY.fullmatch(self.key) or len(self.key) > 253:
            raise errors.ConfigError(f"secret_env {self.name}: key must be a Secret data key, got {self.key!r}")


@dataclass(frozen=True)
class PvcSource:
    claim_name: str

    def __post_init__(self) -> None:
        _require_dns_subdomain("read-only volume claim_name", self.claim_name)


@dataclass(frozen=True)
class HostPathSource:
    path: str

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.startswith("/") or ".." in self.path.split("/"):
            raise errors.ConfigError(f"host_path must be an absolute path without '..', got {self.path!r}")


@dataclass(frozen=True)
class ConfigMapSource:
    name: str

    def __post_init__(self) -> None:
        _require_dns_subdomain("read-only volume ConfigMap name", self.name)


VolumeSource = PvcSource | HostPathSource | ConfigMapSource


@dataclass(frozen=True)
class ReadOnlyVolume:
    """A volume mounted read-only into the agent container."""

    source: VolumeSource
    mount_path: str
    sub_path: str | None = None

    def __post_init__(self) -> None:
        problem = None if self.sub_path is None else validate_sub_path(self.sub_path)
        if problem is not None:
            raise errors.ConfigError(f"read-only volume at {self.mount_path}: {problem}")


def validate_sub_path(sub_path: str) -> str | None:
    """Why ``sub_path`` is unsafe, or None: it must be relative, without empty/./.. segments."""
    if sub_path.startswith("/") or any(seg in ("", ".", "..") for seg in sub_path.split("/")):
        return f"sub_path '{sub_path}' must be relative, without empty, '.' or '..' segments"
    return None


@dataclass(frozen=True)
class PvcVolume:
    """A step's PersistentVolumeClaim mount, read-write unless ``read_only``."""

    claim_name: str
    mount_path: str
    sub_path: str | None = None
    read_only: bool = False

    def problem(self) -> str | None:
        """Why this volume cannot be mounted, or None."""
        if not self.claim_name:
            return "pvc volume needs a non-empty claim_name"
        if self.sub_path is not None:
            return validate_sub_path(self.sub_path)
        return None


@dataclass(frozen=True)
class AgentInput:
    """A file fetched by the input init container before the agent starts."""

    url: str
    mount_path: str


@dataclass(frozen=True)
class PodSettings:
    """Per-step settings for the sandbox; providers that cannot apply one report it."""

    secret_env: tuple[SecretEnvVar, ...] = ()
    service_account: str | None = None
    read_only_volumes: tuple[ReadOnlyVolume, ...] = ()
    managed_settings: str | None = None
    runtime_class: str | None = None
    pvc_volumes: tuple[PvcVolume, ...] = ()
    without_provider_volumes: bool = False

    def __post_init__(self) -> None:
        names = [var.name for var in self.secret_env]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise errors.ConfigError(f"secret_env sets {repeated[0]} twice")
        if self.service_account is not None:
            _require_dns_subdomain("service_account", self.service_account)
        if self.runtime_class and self.runtime_class.strip():  # blank: refused by name when the step is invoked
            _require_dns_subdomain("runtime_class", self.runtime_class)

    def is_empty(self) -> bool:
        return self == PodSettings()
