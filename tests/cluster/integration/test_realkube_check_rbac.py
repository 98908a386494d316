"""The ``ironflow-check`` Role as rendered (examples/k8s/sandbox/check-rbac.yaml) lets its
account exec on a real kube-apiserver; the old create-only grant did not, because the websocket
exec ``ironflow check`` uses is a GET (issue 16 item 10). Skipped when the binaries are not built.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.fakes.exec_pod import POD, exec_namespace

from ironflow import errors
from ironflow.cluster import setup
from ironflow.kube import api as k8s
from ironflow.testing.kubeenv import KubeEnv
from ironflow.testing.polling import eventually


@pytest.fixture
def ns(kube_env: KubeEnv, tmp_path: Path) -> Iterator[str]:
    with exec_namespace(kube_env, tmp_path, "chk") as name:
        yield name


def namespaced_check_rbac(ns: str) -> list[dict[str, Any]]:
    """The rendered account, Role and RoleBinding, all in ``ns`` (the cluster-wide pair is left out)."""
    config = setup.ClusterSetup(namespace=ns, worker_namespace=ns)
    docs = [copy.deepcopy(dict(d.body)) for d in setup.check_rbac(config)]
    return [d for d in docs if d["kind"] in ("ServiceAccount", "Role", "RoleBinding")]


async def test_the_rendered_check_role_may_exec_and_create_only_may_not(kube_env: KubeEnv, ns: str) -> None:
    docs = namespaced_check_rbac(ns)
    (role,) = [d for d in docs if d["kind"] == "Role"]
    exec_rule = next(r for r in role["rules"] if r["resources"] == ["pods/exec"])
    assert sorted(exec_rule["verbs"]) == ["create", "get"]
    create_only = copy.deepcopy(role)
    next(r for r in create_only["rules"] if r["resources"] == ["pods/exec"])["verbs"] = ["create"]
    kube_env.apply_objects([d if d["kind"] != "Role" else create_only for d in docs])
    kube_env.apply_objects([POD], namespace=ns)
    token = kube_env.service_account_token(ns, setup.CHECK_SERVICE_ACCOUNT)
    async with await k8s.KubeApi.connect(kube_env.token_config(token)) as client:

        async def running() -> bool:  # also proves the Role reached the authorizer (pods get)
            try:
                pod = await client.get(k8s.PODS, ns, "box")
            except errors.KubeForbidden:
                return False
            return bool(pod.get("status", {}).get("phase") == "Running")

        await eventually(running, interval_s=0.1, what="the pod Running, read as the check account")
        with pytest.raises(errors.KubeForbidden):
            async with asyncio.timeout(20):
                await client.exec(ns, "box", ("true",))
        kube_env.apply_objects([role])

        async def may_exec() -> bool:
            try:
                async with asyncio.timeout(20):
                    return (await client.exec(ns, "box", ("true",))).exit_code == 0
            except errors.KubeForbidden:
                return False

        await eventually(may_exec, interval_s=0.2, what="the rendered Role to allow the websocket exec")
