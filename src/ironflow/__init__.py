"""ironflow: every AI-agent step in a hardened, single-use sandbox.

The public names: a step's configuration and result, the provider protocol, and the
errors. Providers live in their packages (``ironflow.k8s``, ``ironflow.local``,
``ironflow.agent_sandbox``); the CLI is ``ironflow``. Every name loads on first use: the
provider protocol, so the pure values import without an event loop library, and the values
too, so the ``ironflow`` command's ``--help`` and ``--version`` (whose module imports this
package first) do not pay for modules they never read.
"""

from typing import TYPE_CHECKING

from ironflow import _renamed, errors
from ironflow._lazy import lazy_exports

if TYPE_CHECKING:
    from ironflow.prompts import Prompt
    from ironflow.provider import AgentProvider, LogSink, run_sync
    from ironflow.results import AgentResult
    from ironflow.secrets import Secret
    from ironflow.step_sandbox import AgentInput, PodSettings, PvcVolume, ReadOnlyVolume, SecretEnvVar
    from ironflow.steps import AgentConfig, PermissionMode, StepScope

#: The release; the package metadata takes it from here (pyproject's dynamic version).
__version__ = "0.1.0"

__all__ = [
    "AgentConfig",
    "AgentInput",
    "AgentProvider",
    "AgentResult",
    "LogSink",
    "PermissionMode",
    "PodSettings",
    "Prompt",
    "PvcVolume",
    "ReadOnlyVolume",
    "Secret",
    "SecretEnvVar",
    "StepScope",
    "__version__",
    "errors",
    "run_sync",
]

_renamed.install()

__getattr__ = lazy_exports(
    __name__,
    {
        "prompts": ("Prompt",),
        "provider": ("AgentProvider", "LogSink", "run_sync"),
        "results": ("AgentResult",),
        "secrets": ("Secret",),
        "step_sandbox": ("AgentInput", "PodSettings", "PvcVolume", "ReadOnlyVolume", "SecretEnvVar"),
        "steps": ("AgentConfig", "PermissionMode", "StepScope"),
    },
)
