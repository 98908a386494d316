"""Plain commands in a pod or a Job (``PodRun``, ``JobRun``): their specs, and running them."""

from ironflow.k8s.commands.pod_runs import JobRun, PodRun

__all__ = ["JobRun", "PodRun"]
