"""Contract: create, get, patch, delete through KubeApi (the real kubernetes_asyncio client),
cluster selection, validation and error mapping."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from ironflow import errors
from ironflow.kube import api
from ironflow.testing import find_leaks
from ironflow.testing.kube import KubeTestServer

#: the shipped agent-sandbox CRDs of release 1.0 (package data), so the test never skips
CRDS = resources.files("ironflow.agent_sandbox").joinpath("crds", "v1.0.3")


async def test_create_sets_server_fields_and_get_reads_them_back(kube: Any, make_pod: Any) -> None:
    """A created object gets a uid, a resourceVersion, a creationTimestamp and its namespace."""
    created = await kube.api.create(api.PODS, kube.namespace, make_pod("p1", labels={"app": "x"}))
    meta = created["metadata"]
    assert meta["name"] == "p1"
    assert meta["namespace"] == kube.namespace
    assert meta["uid"]
    assert meta["resourceVersion"]
    assert meta["creationTimestamp"].endswith("Z")
    assert created["status"]["phase"] == "Pending"
    fetched = await kube.api.get(api.PODS, kube.namespace, "p1")
    assert fetched["metadata"]["uid"] == meta["uid"]
    assert fetched["metadata"]["labels"] == {"app": "x"}


async def test_generate_name_gives_distinct_names_with_the_prefix(kube: Any, make_pod: Any) -> None:
    """generateName makes the server pick a fresh suffix each time."""
    first = await kube.api.create(api.PODS, kube.namespace, make_pod(generate_name="gen-"))
    second = await kube.api.create(api.PODS, kube.namespace, make_pod(generate_name="gen-"))
    names = {first["metadata"]["name"], second["metadata"]["name"]}
    assert len(names) == 2
    assert all(n.startswith("gen-") and len(n) == len("gen-") + 5 for n in names)


async def test_resource_versions_increase_across_kinds(kube: Any, make_pod: Any) -> None:
    """resourceVersion is one global, increasing counter."""
    pod = await kube.api.create(api.PODS, kube.namespace, make_pod("rv-pod"))
    cm = await kube.api.create(
        api.CONFIGMAPS,
        kube.namespace,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rv-cm"}, "data": {"k": "v"}},
    )
    assert int(cm["metadata"]["resourceVersion"]) > int(pod["metadata"]["resourceVersion"])


async def test_create_twice_is_a_conflict(kube: Any, make_pod: Any) -> None:
    """A taken name answers 409, mapped to KubeConflict."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("dup"))
    with pytest.raises(errors.KubeConflict) as caught:
        await kube.api.create(api.PODS, kube.namespace, make_pod("dup"))
    assert caught.value.status == 409
    assert caught.value.reason == "AlreadyExists"
    assert "dup" in str(caught.value)


async def test_get_missing_object_is_not_found(kube: Any) -> None:
    """404 maps to KubeNotFound with the object named in the message."""
    with pytest.raises(errors.KubeNotFound) as caught:
        await kube.api.get(api.PODS, kube.namespace, "missing")
    assert caught.value.status == 404
    assert "missing" in str(caught.value)
    assert not caught.value.retryable


async def test_create_in_missing_namespace_is_not_found(kube: Any, make_pod: Any) -> None:
    """Objects cannot be created in a namespace that does not exist."""
    with pytest.raises(errors.KubeNotFound, match="no-such-ns"):
        await kube.api.create(api.PODS, "no-such-ns", make_pod("p"))


async def test_unknown_field_is_refused_with_400(kube: Any, make_pod: Any) -> None:
    """A field the schema does not know fails strict decoding (400, as a real server answers),
    naming the field path."""
    body = make_pod("bad")
    body["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(errors.KubernetesError) as caught:
        await kube.api.create(api.PODS, kube.namespace, body)
    assert caught.value.status == 400
    assert 'unknown field "spec.containers[0].imagePullPolicyy"' in str(caught.value)
    assert not caught.value.retryable


async def test_invalid_label_value_is_refused(kube: Any, make_pod: Any) -> None:
    """Label values must be 63 characters or fewer, as on a real API server."""
    with pytest.raises(errors.KubernetesError) as caught:
        await kube.api.create(api.PODS, kube.namespace, make_pod("lbl", labels={"k": "x" * 64}))
    assert caught.value.status == 422
    assert "metadata.labels" in str(caught.value)


async def test_invalid_name_is_refused(kube: Any, make_pod: Any) -> None:
    """Names must be RFC 1123 subdomains."""
    with pytest.raises(errors.KubernetesError) as caught:
        await kube.api.create(api.PODS, kube.namespace, make_pod("Not_Valid"))
    assert caught.value.status == 422


async def test_merge_patch_changes_labels_and_removes_with_null(kube: Any, make_pod: Any) -> None:
    """patch() sends a JSON merge patch: keys merge, null removes."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("patched", labels={"a": "1", "b": "2"}))
    patched = await kube.api.patch(
        api.PODS, kube.namespace, "patched", {"metadata": {"labels": {"a": "10", "b": None, "c": "3"}}}
    )
    assert patched["metadata"]["labels"] == {"a": "10", "c": "3"}
    assert (await kube.api.get(api.PODS, kube.namespace, "patched"))["metadata"]["labels"] == {"a": "10", "c": "3"}


async def test_patch_of_immutable_pod_field_is_refused(kube: Any, make_pod: Any) -> None:
    """A pod's containers' commands cannot change after creation."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("immutable"))
    with pytest.raises(errors.KubernetesError) as caught:
        await kube.api.patch(
            api.PODS,
            kube.namespace,
            "immutable",
            {"spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["false"]}]}},
        )
    assert caught.value.status == 422


async def test_delete_returns_the_object_and_then_it_is_gone(kube: Any, make_pod: Any) -> None:
    """delete() returns the deleted object; a second delete is KubeNotFound."""
    created = await kube.api.create(api.PODS, kube.namespace, make_pod("del"))
    deleted = await kube.api.delete(api.PODS, kube.namespace, "del", grace_period_seconds=0)
    assert deleted["metadata"]["uid"] == created["metadata"]["uid"]
    with pytest.raises(errors.KubeNotFound):
        await kube.api.get(api.PODS, kube.namespace, "del")
    with pytest.raises(errors.KubeNotFound):
        await kube.api.delete(api.PODS, kube.namespace, "del")


async def test_namespaces_are_cluster_scoped(kube: Any) -> None:
    """Namespaces are created and read without a namespace in the path."""
    created = await kube.api.create(
        api.NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{kube.namespace}-x"}}
    )
    assert "namespace" not in created["metadata"]
    fetched = await kube.api.get(api.NAMESPACES, None, f"{kube.namespace}-x")
    assert fetched["status"]["phase"] == "Active"


async def test_jobs_live_in_batch_v1(kube: Any) -> None:
    """Jobs are created under /apis/batch/v1 and get the Job controller's selector."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j1"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], "restartPolicy": "Never"}}
        },
    }
    created = await kube.api.create(api.JOBS, kube.namespace, job)
    assert created["apiVersion"] == "batch/v1"
    assert (await kube.api.get(api.JOBS, kube.namespace, "j1"))["metadata"]["uid"] == created["metadata"]["uid"]


async def test_request_counters_count_each_verb(kube: Any, make_pod: Any) -> None:
    """The client counts its own requests by verb."""
    before = kube.api.counters.snapshot()
    await kube.api.create(api.PODS, kube.namespace, make_pod("count"))
    await kube.api.get(api.PODS, kube.namespace, "count")
    await kube.api.list(api.PODS, kube.namespace)
    await kube.api.delete(api.PODS, kube.namespace, "count")
    after = kube.api.counters.snapshot()
    for verb in ("create", "get", "list", "delete"):
        assert after.by_verb.get(verb, 0) - before.by_verb.get(verb, 0) == 1
    assert after.total - before.total == 4


# --- cluster selection ------------------------------------------------------------------


async def test_kubeconfig_file_with_context_reaches_the_server(tmp_path: Path) -> None:
    """KubeconfigFile(path, context) loads that file and context."""
    async with KubeTestServer() as server:
        path = tmp_path / "kubeconfig"
        path.write_text(server.kubeconfig_yaml())
        async with await api.KubeApi.connect(api.KubeconfigFile(str(path), context="kube-test")) as kube_api:
            assert (await kube_api.get(api.NAMESPACES, None, "default"))["metadata"]["name"] == "default"


async def test_default_cluster_reads_kubeconfig_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DefaultCluster() uses $KUBECONFIG when it names a file."""
    async with KubeTestServer() as server:
        path = tmp_path / "config"
        path.write_text(server.kubeconfig_yaml())
        monkeypatch.setenv("KUBECONFIG", str(path))
        async with await api.KubeApi.connect(api.DefaultCluster()) as kube_api:
            listed = await kube_api.list(api.NAMESPACES)
            assert {"default", "kube-system"} <= {n["metadata"]["name"] for n in listed.items}


async def test_default_cluster_with_no_kubeconfig_outside_a_pod_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A $KUBECONFIG naming no file, or no ~/.kube/config, and no in-cluster service: the error
    names the path $KUBECONFIG gave (issue 17: it did not), else the home file, and the service."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(errors.KubeClientConfigError) as caught:
        await api.KubeApi.connect(api.DefaultCluster())
    message = str(caught.value)
    assert message == (
        f"failed to create K8s client from default config: $KUBECONFIG={tmp_path / 'absent'} names no file "
        "that exists, and not inside a pod (KUBERNETES_SERVICE_HOST is unset)"
    )
    assert not caught.value.retryable
    monkeypatch.delenv("KUBECONFIG")
    with pytest.raises(errors.KubeClientConfigError, match=r"default config: no ~/.kube/config, and not inside a pod"):
        await api.KubeApi.connect(api.DefaultCluster())


async def test_missing_kubeconfig_file_is_a_config_error(tmp_path: Path) -> None:
    """A kubeconfig path that does not exist is not retryable and names the file."""
    missing = tmp_path / "nope.yaml"
    with pytest.raises(errors.KubeClientConfigError) as caught:
        await api.KubeApi.connect(api.KubeconfigFile(str(missing)))
    assert str(missing) in str(caught.value)
    assert not caught.value.retryable


async def test_unknown_context_is_a_config_error() -> None:
    """An inline kubeconfig with an unknown context fails at connect, naming the source."""
    async with KubeTestServer() as server:
        with pytest.raises(errors.KubeClientConfigError, match="inline kubeconfig"):
            await api.KubeApi.connect(api.KubeconfigInline(server.kubeconfig_yaml(), context="other"))


async def test_in_cluster_without_service_account_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """InCluster() outside a pod fails clearly instead of talking to nowhere."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(errors.KubeClientConfigError, match="in-cluster"):
        await api.KubeApi.connect(api.InCluster())


async def test_inline_kubeconfig_repr_hides_the_token() -> None:
    """KubeconfigInline's repr never shows the YAML, which holds the bearer token."""
    async with KubeTestServer() as server:
        config = server.cluster_config()
        assert not find_leaks([server.token], repr(config), str(config))


async def test_wrong_token_is_refused_without_echoing_it() -> None:
    """A bad bearer token answers 401; the error holds neither token."""
    async with KubeTestServer() as server:
        text = server.kubeconfig_yaml().replace(server.token, "wrong-token-value")
        async with await api.KubeApi.connect(api.KubeconfigInline(text)) as kube_api:
            with pytest.raises(errors.KubernetesError) as caught:
                await kube_api.get(api.NAMESPACES, None, "default")
        assert caught.value.status == 401
        assert not find_leaks([server.token, "wrong-token-value"], caught.value, repr(caught.value), caught.value.args)


# --- custom resources ----------------------------------------------------------------------


def _claim(name: str, template: str = "tpl") -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": template}},
    }


async def test_registered_crd_stores_and_validates_custom_objects(kube: Any) -> None:
    """A CRD read from its YAML makes its kind servable, checked against its schema."""
    server = kube.need_server()
    crd = yaml.safe_load(CRDS.joinpath("extensions.agents.x-k8s.io_sandboxclaims.yaml").read_text())
    served = server.register_crd(crd)
    claims = next(r for r in served if r.version == "v1beta1")
    created = await kube.api.create(claims, kube.namespace, _claim("c1"))
    assert created["metadata"]["uid"]
    assert [c["metadata"]["name"] for c in (await kube.api.list(claims, kube.namespace)).items] == ["c1"]
    bad = _claim("c2")
    bad["spec"]["notAField"] = True
    with pytest.raises(errors.KubernetesError) as caught:
        await kube.api.create(claims, kube.namespace, bad)
    assert caught.value.status == 400  # strict decoding, as for built-in kinds
    assert "notAField" in str(caught.value)


async def test_unregistered_custom_resource_is_not_found(kube: Any) -> None:
    """A resource the server does not serve answers 404."""
    things = api.custom_resource("example.test", "v1", "things", kind="Thing")
    with pytest.raises(errors.KubeNotFound):
        await kube.api.list(things, kube.namespace)


async def test_expired_token_is_reloaded_from_the_kubeconfig_once(tmp_path: Path) -> None:
    """After a 401 the client reloads its kubeconfig (an exec plugin's or a rotated token) and
    retries once; with no new credentials the 401 surfaces, without the token in it."""
    async with KubeTestServer() as server:
        path = tmp_path / "kubeconfig"
        path.write_text(server.kubeconfig_yaml())
        async with await api.KubeApi.connect(api.KubeconfigFile(str(path))) as kube_api:
            await kube_api.get(api.NAMESPACES, None, "default")
            old = server.token
            server.rotate_token()
            path.write_text(server.kubeconfig_yaml())
            assert (await kube_api.get(api.NAMESPACES, None, "default"))["metadata"]["name"] == "default"
            assert server.count("get", "namespaces") == 3  # ok, 401, retried ok
            stale = server.token
            server.rotate_token()  # the file keeps the stale token: nothing better to load
            with pytest.raises(errors.KubernetesError) as caught:
                await kube_api.get(api.NAMESPACES, None, "default")
        assert caught.value.status == 401
        assert not find_leaks([old, stale, server.token], caught.value, repr(caught.value), caught.value.args)
