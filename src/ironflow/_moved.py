"""The old import paths of moved modules, kept for one release: each warns and hands out the new module's names.

The house was cut by job in 0.2 (docs/architecture.md, "Moved modules"): a script that still
imports ``ironflow.local.provider`` gets ``ironflow.local.sandbox_provider``'s names and a
:class:`DeprecationWarning` naming the new path. The finder sits last on ``sys.meta_path``, so
it answers only names no module file has; it is installed by ``import ironflow``.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType
from typing import Any, Final

__all__ = ["MOVED", "install"]

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
