"""Plain commands in a pod or a Job (``PodRun``, ``JobRun``), and a run's service pods (``PodUp``)."""

from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.k8s.commands.pod_ups import PodUp, Readiness

__all__ = ["JobRun", "PodRun", "PodUp", "Readiness"]
