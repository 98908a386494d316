"""Schema validation for the test server's writes: built-in kinds and registered CRDs.

Built-in kinds are checked against ``kubernetes-validate``'s strict schemas for the server's
Kubernetes version; custom resources against their CRD's ``openAPIV3Schema``, made strict
the same way (an object that lists its properties refuses others unless it says
``x-kubernetes-preserve-unknown-fields``). Validators are built once per kind and cached:
the definitions file is large, and a benchmark creates hundreds of objects.

``kubernetes-validate`` is a test dependency, so it is imported here lazily, never by the library.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping
from typing import Any, Protocol

import jsonschema

__all__ = ["SchemaValidator", "builtin_validator", "crd_validator", "strict_crd_schema", "validation_messages"]

#: At most this many problems are reported per write (the real server lists them all,
#: but one or two are what a test reads).
_MAX_PROBLEMS = 5


class SchemaValidator(Protocol):
    """The part of a jsonschema validator the server uses."""

    def iter_errors(self, instance: Any) -> Any: ...


@functools.cache
def _schema_dir(version: str) -> tuple[str, str]:
    from kubernetes_validate import utils

    wanted = utils.major_minor(version.removeprefix("v"))
    candidates = [v for v in utils.all_versions() if utils.major_minor(v) <= wanted]
    if not candidates:
        raise ValueError(f"kubernetes-validate has no schemas for Kubernetes {version}")
    chosen = candidates[-1]
    return f"v{chosen}-local-strict", chosen


@functools.cache
def _registry(version: str) -> Any:
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    directory, _ = _schema_dir(version)
    definitions = utils.schema_contents(f"kubernetes-json-schema/{directory}/_definitions.json", version)
    return Resource.from_contents(definitions) @ Registry()


@functools.cache
def builtin_validator(kind: str, api_version: str, version: str) -> SchemaValidator | None:
    """The strict validator of a built-in kind, or None when the version has no schema for it."""
    from kubernetes_validate import utils

    directory, _ = _schema_dir(version)
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = utils.schema_contents(
            f"kubernetes-json-schema/{directory}/{kind.lower()}-{group_version}.json", version
        )
    except FileNotFoundError:
        return None
    validator: SchemaValidator = jsonschema.validators.Draft202012Validator(schema, registry=_registry(version))
    return validator


def strict_crd_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A CRD's openAPIV3Schema with ``additionalProperties: false`` wherever properties are listed
    and unknown fields are not preserved: what ``fieldValidation=Strict`` refuses."""
    out = copy.deepcopy(dict(schema))

    def walk(node: Any, *, root: bool = False) -> None:
        if isinstance(node, dict):
            props = node.get("properties")
            if (
                isinstance(props, dict)
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
                if root:  # every object may carry these, whatever the CRD lists
                    for key in ("apiVersion", "kind", "metadata"):
                        props.setdefault(key, {"type": "object"} if key == "metadata" else {"type": "string"})
            for key, value in node.items():
                if key in ("properties", "patternProperties", "definitions", "$defs") and isinstance(value, dict):
                    for child in value.values():
                        walk(child)
                elif key in ("items", "additionalProperties", "not"):
                    walk(value)
                elif key in ("allOf", "anyOf", "oneOf") and isinstance(value, list):
                    for child in value:
                        walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(out, root=True)
    return out


def crd_validator(schema: Mapping[str, Any]) -> SchemaValidator:
    """A validator for one served version of a CRD (OpenAPI v3 schema, strict)."""
    validator: SchemaValidator = jsonschema.validators.Draft7Validator(strict_crd_schema(schema))
    return validator


def validation_messages(validator: SchemaValidator, obj: Mapping[str, Any]) -> list[str]:
    """The first few problems, each as ``<field path>: <message>``, messages trimmed."""
    problems: list[str] = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
        message = str(error.message)
        if len(message) > 200:  # the message may quote the whole offending value
            message = message[:200] + "..."
        problems.append(f"{path or '<root>'}: {message}")
        if len(problems) >= _MAX_PROBLEMS:
            break
    return problems
