"""The children a KRO ResourceGraphDefinition would create for one instance, without KRO (pure).

Enough of KRO's templating to check the children of ironflow's RGDs against the CRD schemas
and a real API server: a string that is exactly ``${schema.spec.<field>}`` (or
``${schema.metadata.name|namespace}``) takes the instance's value with its type (an integer
stays an integer); an expression inside a longer string is interpolated. The instance's spec is
the RGD schema's defaults (``integer | default=2``) overlaid with the given fields. Any other
expression (a reference to another resource, a CEL function) is refused: a test that meets one
must say how to resolve it. ``includeWhen`` is ignored, so every child is returned.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["children", "expand", "instance_spec"]

_EXPR: Final = re.compile(r"\$\{([^}]*)\}")


def _default(marker: str) -> tuple[bool, Any]:
    """``'integer | default=2'`` -> (True, 2); no default -> (False, None)."""
    for part in (p.strip() for p in marker.split("|")[1:]):
        if part.startswith("default="):
            return True, json.loads(part.removeprefix("default="))
    return False, None


def instance_spec(rgd: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The instance's spec: the schema's defaults, then ``given``; a required field left out raises."""
    spec: dict[str, Any] = {}
    for field, marker in rgd["spec"]["schema"].get("spec", {}).items():
        has_default, value = _default(str(marker))
        if field in given:
            spec[field] = given[field]
        elif has_default:
            spec[field] = value
        elif "required=true" in str(marker):
            raise ValueError(f"instance of {rgd['metadata']['name']} needs spec.{field}")
    unknown = set(given) - set(spec)
    if unknown:
        raise ValueError(f"{rgd['metadata']['name']} has no spec field {sorted(unknown)}")
    return spec


def _value(expr: str, values: Mapping[str, Any]) -> Any:
    if expr not in values:
        raise ValueError(f"cannot resolve ${{{expr}}} without KRO (known: {', '.join(sorted(values))})")
    return values[expr]


def _resolve(node: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(node, Mapping):
        return {k: _resolve(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, values) for v in node]
    if isinstance(node, str):
        whole = _EXPR.fullmatch(node)
        if whole is not None:
            return _value(whole.group(1), values)
        return _EXPR.sub(lambda m: str(_value(m.group(1), values)), node)
    return node


def children(
    rgd: Mapping[str, Any], *, name: str, namespace: str, spec: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Every resource template of ``rgd`` resolved for the instance ``namespace/name`` with ``spec``."""
    full = instance_spec(rgd, spec or {})
    values = {"schema.metadata.name": name, "schema.metadata.namespace": namespace}
    values.update({f"schema.spec.{k}": v for k, v in full.items()})
    return [_resolve(r["template"], values) for r in rgd["spec"]["resources"]]


def expand(
    docs: Sequence[Mapping[str, Any]], *, name: str, namespace: str, spec: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``docs`` with each ResourceGraphDefinition replaced by its children for one instance.

    ``spec`` is a pool of instance fields: each RGD takes those its schema declares.
    """
    out: list[dict[str, Any]] = []
    for doc in docs:
        if doc["kind"] != "ResourceGraphDefinition":
            out.append(dict(doc))
            continue
        fields = doc["spec"]["schema"].get("spec", {})
        given = {k: v for k, v in spec.items() if k in fields}
        out.extend(children(doc, name=name, namespace=namespace, spec=given))
    return out
