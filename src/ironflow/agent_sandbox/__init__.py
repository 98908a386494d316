"""agent-sandbox (kubernetes-sigs/agent-sandbox): typed values, checked manifests, patterns, provider.

Layering, one way: ``models`` (values) and ``schemas`` (the shipped CRDs) are pure data;
``rules`` check them; ``rendering``, ``patterns``, ``kro`` and ``step_render`` (the settings and
a step's claim and execs) render them, ``catalog`` names the patterns (all pure); ``claims``,
``apply`` and ``claim_steps`` (the ``ClaimStepRunner``) do the I/O through
:mod:`ironflow.kube.api`; ``claim_provider`` builds the settings and runs steps through the
``ClaimStepRunner``. Nothing here imports ``kubernetes_asyncio``.
"""

from typing import TYPE_CHECKING

from ironflow._lazy import lazy_exports
from ironflow._renamed import renamed_names

if TYPE_CHECKING:
    from ironflow.agent_sandbox.catalog import PATTERNS, render_pattern
    from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
    from ironflow.agent_sandbox.claim_steps import ClaimStepRunner
    from ironflow.agent_sandbox.claims import ClaimReapReport, has_condition
    from ironflow.agent_sandbox.models import (
        AgentSandbox,
        ApiVersion,
        ClaimEnvVar,
        EnvVarsInjectionPolicy,
        Lifecycle,
        NetworkPolicyManagement,
        NetworkPolicyRules,
        OperatingMode,
        PodTemplate,
        SandboxClaim,
        SandboxTemplate,
        SandboxWarmPool,
        ShutdownPolicy,
        UpdateStrategy,
        VolumeClaimTemplate,
    )
    from ironflow.agent_sandbox.patterns import PatternOptions
    from ironflow.agent_sandbox.rendering import render, render_all, rfc3339
    from ironflow.agent_sandbox.rules import check, claim_warnings, pvc_name
    from ironflow.agent_sandbox.schemas import schema_problems, validate
    from ironflow.agent_sandbox.step_render import AgentSandboxSettings

__all__ = [
    "PATTERNS",
    "AgentSandbox",
    "AgentSandboxProvider",
    "AgentSandboxSettings",
    "ApiVersion",
    "ClaimEnvVar",
    "ClaimReapReport",
    "ClaimStepRunner",
    "EnvVarsInjectionPolicy",
    "Lifecycle",
    "NetworkPolicyManagement",
    "NetworkPolicyRules",
    "OperatingMode",
    "PatternOptions",
    "PodTemplate",
    "SandboxClaim",
    "SandboxTemplate",
    "SandboxWarmPool",
    "ShutdownPolicy",
    "UpdateStrategy",
    "VolumeClaimTemplate",
    "check",
    "claim_warnings",
    "has_condition",
    "pvc_name",
    "render",
    "render_all",
    "render_pattern",
    "rfc3339",
    "schema_problems",
    "validate",
]

_exports = lazy_exports(
    __name__,
    {
        "claims": ("ClaimReapReport", "has_condition"),
        "rendering": ("render", "render_all", "rfc3339"),
        "models": (
            "AgentSandbox",
            "ApiVersion",
            "ClaimEnvVar",
            "EnvVarsInjectionPolicy",
            "Lifecycle",
            "NetworkPolicyManagement",
            "NetworkPolicyRules",
            "OperatingMode",
            "PodTemplate",
            "SandboxClaim",
            "SandboxTemplate",
            "SandboxWarmPool",
            "ShutdownPolicy",
            "UpdateStrategy",
            "VolumeClaimTemplate",
        ),
        "catalog": ("PATTERNS", "render_pattern"),
        "patterns": ("PatternOptions",),
        "claim_provider": ("AgentSandboxProvider",),
        "rules": ("check", "claim_warnings", "pvc_name"),
        "claim_steps": ("ClaimStepRunner",),
        "schemas": ("schema_problems", "validate"),
        "step_render": ("AgentSandboxSettings",),
    },
)

# The old names (ironflow._renamed), for one release: a type checker reads an alias, a run warns.
if TYPE_CHECKING:
    Sandbox = AgentSandbox
    SandboxStepRunner = ClaimStepRunner
else:
    __getattr__ = renamed_names(__name__, _exports)
