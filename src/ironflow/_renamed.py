"""The old names of renamed modules and symbols, kept for one release: each warns and hands out the new one.

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

Moved modules are listed in :data:`MOVED` (old dotted path -> new): a finder last on
``sys.meta_path``, installed by ``import ironflow``, answers only names no module file has,
with a module whose every name is the new module's.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final, TypeVar

__all__ = ["MOVED", "RENAMED", "install", "renamed_argument", "renamed_names", "warn_renamed"]

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


#: Old dotted module -> where it lives now. Remove an entry one release after it was added.
MOVED: Final = {
    "ironflow.pod_settings": "ironflow.step_sandbox",
    "ironflow.workspace_git": "ironflow.workspaces.git_script",
    "ironflow.workspace_frames": "ironflow.workspaces.frames",
    "ironflow.auth_proxy.client": "ironflow.auth_proxy.admin_client",
    "ironflow.k8s.provider": "ironflow.k8s.pod_provider",
    "ironflow.k8s.settings_file": "ironflow.k8s.provider_file",
    "ironflow.k8s.manifests": "ironflow.k8s.step_manifests",
    "ironflow.k8s.command_manifests": "ironflow.k8s.commands.specs",
    "ironflow.k8s.command_runner": "ironflow.k8s.commands.execution",
    "ironflow.local.provider": "ironflow.local.sandbox_provider",
    "ironflow.local.settings": "ironflow.local.sandbox.environment",
    "ironflow.local.bwrap": "ironflow.local.sandbox.bwrap",
    "ironflow.local.gvisor": "ironflow.local.sandbox.gvisor",
    "ironflow.local.limits": "ironflow.local.sandbox.limits",
    "ironflow.agent_sandbox.provider": "ironflow.agent_sandbox.claim_provider",
    "ironflow.agent_sandbox.manifests": "ironflow.agent_sandbox.rendering",
    "ironflow.agent_sandbox.steps": "ironflow.agent_sandbox.step_render",
    "ironflow.testing.postgres": "ironflow.testing.postgres_server",
    "ironflow.testing.temporal": "ironflow.testing.temporal_server",
    "ironflow.temporal.context": "ironflow.temporal.workflow",
    "ironflow.sandbox_runtime.client": "ironflow.sessions.client",
    "ironflow.sandbox_runtime.remote": "ironflow.sessions.remote",
    "ironflow.sandbox_runtime.sync": "ironflow.sessions.sync",
    "ironflow.sandbox_runtime.untar": "ironflow.sessions.untar",
    "ironflow.sandbox_runtime.tar_members": "ironflow.sessions.tar_members",
    "ironflow.k8s.session_bridge": "ironflow.k8s.sessions.bridge",
    "ironflow.k8s.session_pods": "ironflow.k8s.sessions.session_pod",
    "ironflow.k8s.session_wire": "ironflow.k8s.sessions.wire",
    "ironflow.k8s.session_workspaces": "ironflow.k8s.sessions.clones",
    "ironflow.local.gvisor_sessions": "ironflow.local.sessions.gvisor_runtime",
    "ironflow.local.session_agents": "ironflow.local.sessions.agents",
    "ironflow.local.session_workspaces": "ironflow.local.sessions.changesets",
    "ironflow.agent_sandbox.sessions": "ironflow.agent_sandbox.claim_sessions",
}


class _Forward:
    """Loads an old path as a module whose every name is the new module's (looked up on use)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        warnings.warn(
            f"{module.__name__} moved to {self.new}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        target = importlib.import_module(self.new)

        def forward(name: str) -> object:
            return getattr(target, name)

        module.__getattr__ = forward  # type: ignore[method-assign]
        module.__dict__["__all__"] = list(getattr(target, "__all__", ()))
        module.__doc__ = f"Moved to :mod:`{self.new}`."


class _Finder:
    """A ``sys.meta_path`` finder for the names in :data:`MOVED` only."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> Any:
        new = MOVED.get(fullname)
        if new is None:
            return None
        from importlib.util import spec_from_loader

        loader: Any = _Forward(new)
        return spec_from_loader(fullname, loader)


def install() -> None:
    """Put the finder last on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
