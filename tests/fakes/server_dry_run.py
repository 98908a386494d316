"""Send a rendered set of objects to the real kube-apiserver as a server-side dry run.

The namespaces and ServiceAccounts are created for real (a dry-run object in a namespace that
does not exist, or a pod whose account does not exist, is refused for that reason alone);
everything else is applied with ``dryRun=All``, so the server validates, defaults and admits
it and stores nothing. Each Deployment's pod template is also dry-run as a Pod in its
namespace, so PodSecurity admission judges the pod itself, not only the Deployment.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ironflow.testing.kubeenv import KubeEnv, KubeEnvError

__all__ = ["dry_run_set"]

_REAL_KINDS = ("Namespace", "ServiceAccount")


@contextlib.contextmanager
def dry_run_set(env: KubeEnv, objects: Sequence[Mapping[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The server's answers for ``objects`` (dry run), then for each Deployment's pod; namespaces removed after."""
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    try:
        for ns in namespaces:
            meta = ns["metadata"]
            env.create_namespace(meta["name"], labels=meta.get("labels"))
        env.apply_objects([o for o in objects if o["kind"] == "ServiceAccount"])
        answers = env.apply_objects([o for o in objects if o["kind"] not in _REAL_KINDS], dry_run=True)
        pods = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{d['metadata']['name']}-dry-run", "namespace": d["metadata"]["namespace"]},
                "spec": d["spec"]["template"]["spec"],
            }
            for d in objects
            if d["kind"] == "Deployment"
        ]
        yield answers + env.apply_objects(pods, dry_run=True)
    finally:
        for ns in namespaces:
            with contextlib.suppress(KubeEnvError, OSError):
                env.request("DELETE", f"/api/v1/namespaces/{ns['metadata']['name']}")
