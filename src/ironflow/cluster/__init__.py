"""Cluster-admin tooling: what an administrator applies once, and how a live cluster is checked.

The setup manifests (namespace, RBAC, RuntimeClass, presets), egress policies (Cilium or
plain NetworkPolicies), the offline Cilium check, the checks of a live sandbox, the
example set under ``examples/k8s/sandbox/`` and the runner Dockerfile lint. All pure:
the I/O (``ironflow check``, ``ironflow manifests``) lives in the CLI.
"""

__all__: list[str] = []
