"""The agent-sandbox CRD schemas shipped with ironflow, and validation against them.

The eight CRD files of ``kubernetes-sigs/agent-sandbox`` (Apache-2.0, ``crds/LICENSE``)
are package data: ``crds/v0.4.6`` serves ``v1alpha1`` as the seed documents it,
``crds/v1.0.3`` serves ``v1beta1`` only (the 1.0 shape: ``operatingMode``, ``warmPoolRef``),
the release the real-API tier runs. Release 0.5.x served both with the same schemas (its
``v1beta1`` lacks only the newer core pod fields), so it is not shipped. Nothing here reads
a machine path.

:func:`validate` also applies the rules ``render`` applies that a raw object shows (a v1alpha1
claim with env and a warm pool), so both refuse the same object in the same words. Validation
against the schema is strict, as ``kubectl apply --validate=strict`` would be: an object that lists
its properties refuses any other (unless the schema says
``x-kubernetes-preserve-unknown-fields``); ``x-kubernetes-int-or-string`` accepts an integer
or a string; ``nullable`` accepts null. ``jsonschema`` is imported lazily, on first use.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

import yaml

from ironflow import errors
from ironflow.agent_sandbox import rules

__all__ = [
    "DEFAULT_RELEASE",
    "RELEASES",
    "CrdKind",
    "crd",
    "crd_documents",
    "kinds",
    "openapi_schema",
    "schema_problems",
    "validate",
]

#: The release whose schema a version is checked against, by API version.
DEFAULT_RELEASE: Final = {"v1alpha1": "v0.4.6", "v1beta1": "v1.0.3"}
RELEASES: Final = ("v0.4.6", "v1.0.3")
_MAX_PROBLEMS: Final = 5


@dataclass(frozen=True)
class CrdKind:
    """One of the four kinds: its API group, plural and CRD file name."""

    kind: str
    group: str
    plural: str

    @property
    def filename(self) -> str:
        return f"{self.group}_{self.plural}.yaml"


_KINDS: Final = (
    CrdKind("Sandbox", "agents.x-k8s.io", "sandboxes"),
    CrdKind("SandboxTemplate", "extensions.agents.x-k8s.io", "sandboxtemplates"),
    CrdKind("SandboxClaim", "extensions.agents.x-k8s.io", "sandboxclaims"),
    CrdKind("SandboxWarmPool", "extensions.agents.x-k8s.io", "sandboxwarmpools"),
)


def kinds() -> tuple[CrdKind, ...]:
    """The four agent-sandbox kinds."""
    return _KINDS


def _kind(kind: str) -> CrdKind:
    for k in _KINDS:
        if k.kind == kind:
            return k
    known = ", ".join(k.kind for k in _KINDS)
    raise errors.ConfigError(f"unknown agent-sandbox kind '{kind}'; known: {known}")


@functools.cache
def crd(kind: str, release: str) -> Mapping[str, Any]:
    """The CustomResourceDefinition of ``kind`` in ``release`` (parsed once, cached; do not mutate)."""
    if release not in RELEASES:
        raise errors.ConfigError(f"unknown agent-sandbox release '{release}'; shipped: {', '.join(RELEASES)}")
    text = resources.files("ironflow.agent_sandbox").joinpath("crds", release, _kind(kind).filename).read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader parses 400 KB files 10x faster
    data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    if not isinstance(data, dict):
        raise errors.ConfigError(f"the shipped CRD of {kind} ({release}) is not a mapping")
    return data


def crd_documents(release: str) -> list[Mapping[str, Any]]:
    """The four CRDs of a release, e.g. to install them into a test API server."""
    return [crd(k.kind, release) for k in _KINDS]


def openapi_schema(kind: str, version: str, release: str | None = None) -> Mapping[str, Any]:
    """The ``openAPIV3Schema`` of ``kind`` at ``version`` (``v1alpha1``/``v1beta1``)."""
    chosen = release or DEFAULT_RELEASE.get(version)
    if chosen is None:
        raise errors.ConfigError(f"unknown agent-sandbox API version '{version}'; use v1alpha1 or v1beta1")
    for entry in crd(kind, chosen)["spec"]["versions"]:
        if entry["name"] == version:
            schema: Mapping[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    raise errors.ConfigError(f"{kind} has no version {version} in release {chosen}")


def _strict(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema as JSON Schema: strict objects, int-or-string, nullable."""
    out = copy.deepcopy(dict(schema))

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for child in node:
                walk(child)
            return
        if not isinstance(node, dict):
            return
        if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if node.get("nullable") and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        props = node.get("properties")
        preserve = node.get("x-kubernetes-preserve-unknown-fields")
        if isinstance(props, dict) and "additionalProperties" not in node and not preserve:
            node["additionalProperties"] = False
        for key, value in node.items():
            if key in ("properties", "patternProperties") and isinstance(value, dict):
                for child in value.values():
                    walk(child)
            elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
                walk(value)

    walk(out)
    root = out.setdefault("properties", {})
    root.setdefault("apiVersion", {"type": "string"})
    root.setdefault("kind", {"type": "string"})
    # The API server validates metadata itself; the CRD schema only says "object".
    root["metadata"] = {"type": "object"}
    return out


@functools.cache
def _validator(kind: str, version: str, release: str | None) -> Any:
    try:
        import jsonschema
    except ImportError as exc:  # pragma: no cover - jsonschema ships with the test extra
        raise errors.ConfigError(
            "validating agent-sandbox objects needs the 'jsonschema' package: pip install jsonschema"
        ) from exc
    return jsonschema.validators.Draft7Validator(_strict(openapi_schema(kind, version, release)))


def schema_problems(obj: Mapping[str, Any], *, release: str | None = None) -> list[str]:
    """What the CRD schema refuses in ``obj``, as ``<field path>: <message>`` (first few; pure)."""
    kind = str(obj.get("kind", ""))
    version = str(obj.get("apiVersion", "")).rsplit("/", 1)[-1]
    validator = _validator(_kind(kind).kind, version, release)
    problems: list[str] = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path]):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
        message = str(error.message)
        problems.append(f"{path or '<root>'}: {message[:200] + '...' if len(message) > 200 else message}")
        if len(problems) >= _MAX_PROBLEMS:
            break
    return problems


def validate(obj: Mapping[str, Any], *, release: str | None = None) -> None:
    """Refuse an object its CRD schema refuses, or that ``render`` refuses by a rule the raw
    object shows (:func:`~ironflow.agent_sandbox.rules.raw_object_problem`): the two agree.

    Raises:
        ConfigError: the rule's message, as ``render`` words it; else naming the kind, the
            object and the first schema problems by field path.
    """
    problem = rules.raw_object_problem(obj)
    if problem is not None:
        raise errors.ConfigError(problem)
    problems = schema_problems(obj, release=release)
    if problems:
        name = (obj.get("metadata") or {}).get("name", "?")
        raise errors.ConfigError(
            f"{obj.get('kind')} '{name}' does not match the {obj.get('apiVersion')} schema: " + "; ".join(problems)
        )
