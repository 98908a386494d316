"""The old names of renamed symbols, kept for one release: each warns and hands out the new one.

One word means one thing (docs/architecture.md, "Words"): when a name said the wrong word, it
was renamed and the old name stays importable until the next release. A module lists its old
names in :data:`RENAMED` and, at its end, gives a type checker plain aliases and a run the
warning (PEP 562)::

    if TYPE_CHECKING:
        OldName = NewName
    else:
        __getattr__ = renamed_names(__name__)  # a facade chains its lazy_exports as the fallback

The old names are not in ``__all__``: ``from module import *`` hands out the new names only.
Renamed methods and parameters warn through :func:`warn_renamed`.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["RENAMED", "renamed_argument", "renamed_names", "warn_renamed"]

#: Module -> {old name: new name}. Remove an entry one release after it was added.
RENAMED: Final[dict[str, dict[str, str]]] = {
    "ironflow.steps": {"AccountSession": "AccountLease"},
    "ironflow.claude.layout": {"SESSIONS_MOUNT_PATH": "CONVERSATIONS_MOUNT_PATH"},
    "ironflow.k8s.hardening": {"SESSIONS_VOLUME": "CONVERSATIONS_VOLUME"},
    "ironflow.agent_sandbox.models": {"Sandbox": "AgentSandbox"},
    "ironflow.agent_sandbox": {"Sandbox": "AgentSandbox", "SandboxStepRunner": "ClaimStepRunner"},
    "ironflow.agent_sandbox.claim_steps": {"SandboxStepRunner": "ClaimStepRunner"},
    "ironflow.agent_sandbox.patterns": {
        "SESSIONS_STORAGE": "CONVERSATIONS_STORAGE",
        "sessions_pvc": "conversations_pvc",
    },
}


def warn_renamed(where: str, old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``where``'s ``old`` is now ``new`` (for attributes and parameters, too)."""
    warnings.warn(
        f"{where}.{old} is renamed {new}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


_T = TypeVar("_T")


def renamed_argument(where: str, old: str, old_value: _T | None, new: str, new_value: _T | None) -> _T | None:
    """``new_value``, or ``old_value`` given under the parameter's old name (warns; both: TypeError)."""
    if old_value is None:
        return new_value
    warn_renamed(where, old, new, stacklevel=4)
    if new_value is not None:
        raise TypeError(f"{where} takes {new} or its old name {old}, not both")
    return old_value


def renamed_names(module: str, fallback: Callable[[str], object] | None = None) -> Callable[[str], object]:
    """The module ``__getattr__`` serving ``module``'s old names from :data:`RENAMED` (then ``fallback``)."""
    names = RENAMED.get(module, {})

    def __getattr__(name: str) -> object:
        new = names.get(name)
        if new is not None:
            warn_renamed(module, name, new)
            return getattr(sys.modules[module], new)
        if fallback is not None:
            return fallback(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
