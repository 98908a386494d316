"""Check a rendered manifest against the Kubernetes API schemas, strictly, for the versions we support.

Strict mode refuses unknown fields, so a typo (``volumeMount``) or a field placed one level
off fails here instead of being silently dropped by the API server. ``kubernetes-validate``
is a test dependency: it is imported when a check runs, never by the library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["SUPPORTED_VERSIONS", "ManifestInvalid", "validate_manifest", "validate_manifests"]

#: Oldest and newest Kubernetes minor versions ironflow renders for.
SUPPORTED_VERSIONS: Final = ("1.30", "1.37")


class ManifestInvalid(AssertionError):
    """A manifest does not validate; the message names the version, the field path and the rule."""


def validate_manifest(obj: Mapping[str, Any], versions: Iterable[str] = SUPPORTED_VERSIONS) -> None:
    """Raise :class:`ManifestInvalid` unless ``obj`` validates strictly for every version.

    >>> validate_manifest({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    """
    import kubernetes_validate

    kind = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
    for version in versions:
        try:
            kubernetes_validate.validate(dict(obj), version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path) or "(root)"
            raise ManifestInvalid(f"{kind} is invalid for Kubernetes {version}: {path}: {exc.message}") from None
        except kubernetes_validate.SchemaNotFoundError as exc:
            raise ManifestInvalid(f"{kind}: no schema for Kubernetes {version}: {exc.message}") from None


def validate_manifests(objs: Iterable[Mapping[str, Any]], versions: Iterable[str] = SUPPORTED_VERSIONS) -> None:
    """:func:`validate_manifest` on each object (e.g. the list ``provider.manifests`` returns)."""
    versions = tuple(versions)
    for obj in objs:
        validate_manifest(obj, versions)
