"""The sandbox settings a step brings: env from Secrets, volumes, inputs, service account,
runtime class (pure).

Each value checks itself when it is built and names the field it refuses, so nothing invalid
reaches a renderer; what depends on the backend (a reserved mount path, a preset name) is the
backend's check, through :func:`ironflow.claude.layout.mount_path_problem`.

A read-only volume has one spelling in every file, step and provider alike
(:func:`read_only_volume_from`, :func:`read_only_volume_dict`): ``{pvc: CLAIM, mount_path,
sub_path}``, or ``host_path: PATH`` or ``config_map: NAME`` in place of ``pvc``.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any, Final

from ironflow import errors, labels, settings_file

__all__ = [
    "OLD_READ_ONLY_VOLUME_KEY",
    "READ_ONLY_VOLUME_KEYS",
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
    "read_only_volume_dict",
    "read_only_volume_from",
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


#: The source keys of a read-only volume in a file, and the value each makes.
_SOURCE_KEYS: Final[dict[str, type[PvcSource] | type[HostPathSource] | type[ConfigMapSource]]] = {
    "pvc": PvcSource,
    "host_path": HostPathSource,
    "config_map": ConfigMapSource,
}
#: The keys of a read-only volume in a step or provider file.
READ_ONLY_VOLUME_KEYS: Final = (*_SOURCE_KEYS, "mount_path", "sub_path")


#: The old spelling's key (``source: {PvcSource: {claim_name}}``), which step files still take.
OLD_READ_ONLY_VOLUME_KEY: Final = "source"
#: Each old source's name -> (its key in the one spelling, its field).
_OLD_SOURCES: Final = {
    "PvcSource": ("pvc", "claim_name"),
    "HostPathSource": ("host_path", "path"),
    "ConfigMapSource": ("config_map", "name"),
}


def read_only_volume_from(item: settings_file.Section) -> ReadOnlyVolume:
    """A read-only volume as a step or provider file spells it: exactly one of ``pvc``,
    ``host_path``, ``config_map``, and ``mount_path`` (the one reader of both files). A section
    that knows :data:`OLD_READ_ONLY_VOLUME_KEY` (a step file's) also takes the old spelling, warning.

    >>> read_only_volume_from(settings_file.Section({"pvc": "repos", "mount_path": "/r"}, known=READ_ONLY_VOLUME_KEYS))
    ReadOnlyVolume(source=PvcSource(claim_name='repos'), mount_path='/r', sub_path=None)
    """
    if item.has(OLD_READ_ONLY_VOLUME_KEY):
        return _old_read_only_volume(item)
    sources = [k for k in _SOURCE_KEYS if item.has(k)]
    if len(sources) != 1:
        raise errors.ConfigError(f"{item.path}: needs exactly one of pvc, host_path, config_map (got {len(sources)})")
    item.require("mount_path")
    kind = sources[0]
    return ReadOnlyVolume(_SOURCE_KEYS[kind](item.text(kind)), item.text("mount_path"), item.optional_text("sub_path"))


def _old_read_only_volume(item: settings_file.Section) -> ReadOnlyVolume:
    """``{source: {PvcSource: {claim_name}}, mount_path, sub_path}``, for one release (warns)."""
    mixed = [k for k in _SOURCE_KEYS if item.has(k)]
    if mixed:
        raise item.error("source", f"is the old spelling of '{mixed[0]}': keep only '{mixed[0]}'")
    item.require("mount_path")
    source = item.section("source", tuple(_OLD_SOURCES))
    if len(source.data) != 1:
        raise item.error("source", f"must name one of {', '.join(_OLD_SOURCES)}")
    ((kind, _),) = source.data.items()
    new_key, field_name = _OLD_SOURCES[kind]
    spec = source.section(kind, (field_name,))
    warnings.warn(
        f"{item.key_path('source')}: {{{kind}: {{{field_name}: ...}}}} is the old spelling of a read-only "
        f"volume; write '{new_key}: ...' beside mount_path, as provider files do (the old one goes in the "
        "next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    return ReadOnlyVolume(
        _SOURCE_KEYS[new_key](spec.text(field_name)), item.text("mount_path"), item.optional_text("sub_path")
    )


def read_only_volume_dict(volume: ReadOnlyVolume) -> dict[str, Any]:
    """``volume`` as :func:`read_only_volume_from` reads it (what ``AgentConfig.to_dict`` writes).

    >>> read_only_volume_dict(ReadOnlyVolume(HostPathSource("/srv"), "/data/srv"))
    {'host_path': '/srv', 'mount_path': '/data/srv'}
    """
    source = volume.source
    if isinstance(source, PvcSource):
        out: dict[str, Any] = {"pvc": source.claim_name}
    elif isinstance(source, HostPathSource):
        out = {"host_path": source.path}
    else:
        out = {"config_map": source.name}
    out["mount_path"] = volume.mount_path
    if volume.sub_path is not None:
        out["sub_path"] = volume.sub_path
    return out


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
