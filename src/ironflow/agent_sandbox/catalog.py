"""The patterns by name: the one registry ``ironflow sandbox render`` and the tests read (pure).

It sits above both renderers so they point one way: :mod:`~ironflow.agent_sandbox.kro`
builds on :mod:`~ironflow.agent_sandbox.patterns`, and neither imports this module.

=======================  ================================================================
pattern                  objects
=======================  ================================================================
ephemeral                Sandbox, emptyDir workspace, shutdownPolicy Delete
standalone-pvc           PVCs (workspace, memory) + Sandbox mounting them (they survive it)
warm-pool                SandboxTemplate + SandboxWarmPool + SandboxClaim
network-secure           SandboxTemplate, managed NetworkPolicy, secure default rules
network-air-gapped       SandboxTemplate, managed NetworkPolicy, no traffic either way
network-custom-egress    SandboxTemplate, router ingress + the given egress CIDRs/ports
kro-raw                  concept 07: Runner RGD (owns a Sandbox) + user RGD (PVC siblings,
                         ConfigMap, Runner, optional CronJob orchestrator)
kro-template             concept 08: one RGD (SandboxTemplate, SandboxWarmPool, ConfigMap,
                         SandboxClaim, optional CronJob creating claims with a TTL)
=======================  ================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from ironflow import errors, settings_file
from ironflow.agent_sandbox import kro, models, patterns

__all__ = ["PATTERNS", "render_pattern"]

PATTERNS: Final[Mapping[str, Callable[[patterns.PatternOptions], list[dict[str, Any]]]]] = {
    "ephemeral": patterns.render_ephemeral,
    "standalone-pvc": patterns.render_standalone,
    "warm-pool": patterns.render_warm_pool,
    "network-secure": patterns.render_network(None),
    "network-air-gapped": patterns.render_network(models.NetworkPolicyRules(ingress=(), egress=())),
    "network-custom-egress": patterns.render_custom_egress,
    "kro-raw": kro.raw_sandbox_rgds,
    "kro-template": kro.template_rgd,
}


def render_pattern(pattern: str, options: patterns.PatternOptions | None = None) -> list[dict[str, Any]]:
    """The objects of ``pattern`` (a key of :data:`PATTERNS`), in apply order.

    Raises:
        ConfigError: an unknown pattern (the known ones named), or a refused option.
    """
    render = PATTERNS.get(pattern)
    if render is None:
        raise errors.ConfigError(settings_file.unknown_name_message("pattern", pattern, list(PATTERNS)))
    return render(options or patterns.PatternOptions())
