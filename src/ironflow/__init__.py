"""ironflow: every AI-agent step in a hardened, single-use sandbox.

The public names: a step's configuration and result, the provider protocol, and the
errors. Providers live in their packages (``ironflow.k8s``, ``ironflow.local``,
``ironflow.agent_sandbox``); the CLI is ``ironflow``.
"""

from ironflow import errors
from ironflow.provider import AgentProvider, LogSink
from ironflow.secrets import Secret
from ironflow.steps import (
    Agent,
    AgentConfig,
    AgentInput,
    AgentResult,
    PermissionMode,
    PodSettings,
    PvcVolume,
    ReadOnlyVolume,
    SecretEnvVar,
)

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentInput",
    "AgentProvider",
    "AgentResult",
    "LogSink",
    "PermissionMode",
    "PodSettings",
    "PvcVolume",
    "ReadOnlyVolume",
    "Secret",
    "SecretEnvVar",
    "errors",
]
