"""Kubernetes resource quantities (``500m``, ``2``, ``1.5Gi``, ``1e3``): the syntax check, their
value, and a container's ``resources`` block (pure).

The API server refuses a malformed quantity only when the pod is created, after a token
was issued and a ConfigMap written; checking it where a setting is built names the
setting instead. A limit or a size is never negative, so no sign is accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

__all__ = ["container_resources", "quantity_problem", "quantity_value"]

#: <number><suffix>: digits with an optional fraction, then a binary (Ki..Ei), decimal (m, k..E)
#: or exponent (e3, E-2) suffix, as in k8s.io/apimachinery's resource.Quantity.
_QUANTITY: Final = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?")
_SPLIT: Final = re.compile(r"(?P<number>\d+(?:\.\d*)?|\.\d+)(?P<suffix>.*)")
_SUFFIXES: Final = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate("kMGTPE")},
    **{f"{s}i": Decimal(1024) ** (i + 1) for i, s in enumerate("KMGTPE")},
}


def quantity_problem(name: str, value: str, *, example: str) -> str | None:
    """Why ``value`` is not a non-negative quantity for setting ``name``, or None.

    >>> quantity_problem("resources.memory_limit", "4Gi", example="4Gi") is None
    True
    >>> quantity_problem("resources.memory_limit", "-1Gi", example="4Gi")
    "resources.memory_limit must be a non-negative Kubernetes quantity such as '4Gi', got '-1Gi'"
    """
    if _QUANTITY.fullmatch(value) is None:
        return f"{name} must be a non-negative Kubernetes quantity such as '{example}', got '{value}'"
    return None


def quantity_value(value: str) -> Decimal:
    """The number a well-formed quantity stands for, to compare a request with its limit.

    >>> quantity_value("500m") < quantity_value("1") < quantity_value("1Ki") == quantity_value("1.024e3")
    True
    """
    match = _SPLIT.fullmatch(value) if _QUANTITY.fullmatch(value) else None
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, suffix = Decimal(match["number"]), match["suffix"]
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _SUFFIXES[suffix]


def container_resources(requests: Mapping[str, str | None], limits: Mapping[str, str | None]) -> dict[str, Any]:
    """A container's ``resources``: the quantities set, an empty ``requests`` or ``limits`` left out.

    >>> container_resources({"cpu": "500m", "memory": None}, {"memory": None})
    {'requests': {'cpu': '500m'}}
    """
    out: dict[str, Any] = {}
    for key, values in (("requests", requests), ("limits", limits)):
        chosen = {name: value for name, value in values.items() if value}
        if chosen:
            out[key] = chosen
    return out
