"""Kubernetes: the ephemeral agent pod, its settings, and running it; plain-command and service pods.

Layering: ``settings``, ``builders``, ``provider_file``, ``hardening``, ``step_manifests``,
``step_objects``, ``environments``, ``commands.specs`` and ``commands.service_specs`` are pure (values in, dicts out);
``builders`` is the fluent face over ``ProviderSettings`` that ``pod_provider`` inherits and
adds rendering and ``run`` to; ``step_runs`` (the ``StepRunner``),
``pods``, ``pod_wait``, ``cleanup``, ``reaper``, ``commands.execution`` and ``commands.service_start``
do the I/O through
:mod:`ironflow.kube`.
Nothing pure imports an I/O module.
"""

from typing import TYPE_CHECKING

from ironflow._lazy import lazy_exports
from ironflow.claude.profile import ClaudeProfile
from ironflow.k8s.environments import EnvironmentVolume
from ironflow.k8s.hardening import SandboxSettings
from ironflow.k8s.settings import ImagePullPolicy, K8sResources, ProviderSettings, Toleration
from ironflow.labels import (
    ANNOTATION_EXPIRES_AT,
    LABEL_COMPONENT,
    LABEL_EGRESS_PROFILE,
    LABEL_MANAGED_BY,
    LABEL_ROOT_RUN_ID,
    LABEL_RUN_ID,
    LABEL_STEP,
    sanitize_label_value,
)

if TYPE_CHECKING:
    from ironflow.k8s.commands.execution import PodRunOutput
    from ironflow.k8s.commands.pod_runs import JobRun, PodRun
    from ironflow.k8s.commands.pod_ups import PodUp, Readiness
    from ironflow.k8s.commands.service_start import ServicePod
    from ironflow.k8s.pod_provider import K8sEphemeralProvider

__all__ = [
    "ANNOTATION_EXPIRES_AT",
    "LABEL_COMPONENT",
    "LABEL_EGRESS_PROFILE",
    "LABEL_MANAGED_BY",
    "LABEL_ROOT_RUN_ID",
    "LABEL_RUN_ID",
    "LABEL_STEP",
    "ClaudeProfile",
    "EnvironmentVolume",
    "ImagePullPolicy",
    "JobRun",
    "K8sEphemeralProvider",
    "K8sResources",
    "PodRun",
    "PodRunOutput",
    "PodUp",
    "ProviderSettings",
    "Readiness",
    "SandboxSettings",
    "ServicePod",
    "Toleration",
    "sanitize_label_value",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "commands": ("JobRun", "PodRun", "PodUp", "Readiness"),
        "commands.execution": ("PodRunOutput",),
        "commands.service_start": ("ServicePod",),
        "pod_provider": ("K8sEphemeralProvider",),
    },
)
