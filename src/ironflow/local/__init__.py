"""The local sandbox: agent steps and plain commands under bubblewrap or gVisor.

Layers point one way: ``bwrap`` and ``gvisor`` render argv (pure); ``forwarder`` runs
inside the sandbox (stdlib only); ``step_proxy`` serves the in-process auth proxy;
``sandbox_config`` reads and checks the provider's settings; ``sandbox_provider`` (over it)
starts, watches and tears down the sandbox; ``sessions`` keeps one open (the
runtime inside; under gVisor its socket and bundle from ``sessions.gvisor_runtime``).
"""

from typing import TYPE_CHECKING

from ironflow._lazy import lazy_exports

if TYPE_CHECKING:
    from ironflow.local.offline import OfflineProvider
    from ironflow.local.sandbox.bwrap import ReadOnlyMount
    from ironflow.local.sandbox_provider import (
        CommandResult,
        Isolation,
        LocalProfile,
        LocalSandboxProvider,
        ProxyCredential,
    )

__all__ = [
    "CommandResult",
    "Isolation",
    "LocalProfile",
    "LocalSandboxProvider",
    "OfflineProvider",
    "ProxyCredential",
    "ReadOnlyMount",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "sandbox.bwrap": ("ReadOnlyMount",),
        "offline": ("OfflineProvider",),
        "sandbox_provider": ("CommandResult", "Isolation", "LocalProfile", "LocalSandboxProvider", "ProxyCredential"),
    },
)
