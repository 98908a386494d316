"""Kubernetes resource quantities (``500m``, ``2``, ``1.5Gi``, ``1e3``): the syntax check (pure).

The API server refuses a malformed quantity only when the pod is created, after a token
was issued and a ConfigMap written; checking it where a setting is built names the
setting instead. A limit or a size is never negative, so no sign is accepted.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["quantity_problem"]

#: <number><suffix>: digits with an optional fraction, then a binary (Ki..Ei), decimal (m, k..E)
#: or exponent (e3, E-2) suffix, as in k8s.io/apimachinery's resource.Quantity.
_QUANTITY: Final = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?")


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
