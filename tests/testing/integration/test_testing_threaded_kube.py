"""``ThreadedKube``: the server's state is read on its own loop, never from the test's thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ironflow.kube import api as k8s
from ironflow.testing.kube import PodScript
from ironflow.testing.polling import eventually_sync
from ironflow.testing.threaded_kube import ThreadedKube

NS = "agents"


@pytest.fixture
def kube() -> Iterator[ThreadedKube]:
    with ThreadedKube(namespaces=("default", NS)) as st:
        yield st


def _pod(name: str) -> dict[str, object]:
    container = {"name": name, "image": "busybox", "command": ["sleep", "60"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container]}}


async def _create_and_delete(st: ThreadedKube, name: str) -> None:
    async with await k8s.KubeApi.connect(st.server.cluster_config()) as api:
        await api.create(k8s.PODS, NS, _pod(name))
        await api.delete(k8s.PODS, NS, name)


def test_server_refuses_the_tests_thread_and_answers_on_its_loop(kube: ThreadedKube) -> None:
    with pytest.raises(RuntimeError, match="for its own loop"):
        kube.server.objects(k8s.PODS, NS)
    assert kube.soon(lambda: kube.server.objects(k8s.PODS, NS)) == []
    assert "kind: Config" in kube.kubeconfig_yaml()


def test_call_from_the_loop_itself_is_refused_not_a_deadlock(kube: ThreadedKube) -> None:
    with pytest.raises(RuntimeError, match="cannot run on that loop"):
        kube.soon(lambda: kube.objects(k8s.PODS, NS))


def test_a_deleted_running_pod_is_read_gone_on_the_loop(kube: ThreadedKube) -> None:
    """The delete answers before the fake kubelet removes a running pod; ``objects`` sees the end."""
    kube.soon(lambda: kube.server.script_pods(PodScript(name_prefix="run-", run_for=None)))
    kube.call(_create_and_delete(kube, "run-1"))
    eventually_sync(lambda: kube.objects(k8s.PODS, NS) == [], limit_s=5, what="the deleted pod gone")
