"""The worker pod as owner (ironflow.kube.owners): read from the downward-API env, stamped on
managed objects, an ownerReference only in the worker pod's own namespace."""

from __future__ import annotations

import copy
import doctest
from typing import Any

import pytest

from ironflow import errors, labels
from ironflow.kube import owners
from ironflow.kube.owners import WorkerOwner

OWNER = WorkerOwner("ironflow-worker-7d9f-abcde", "0b6e5c1a-2f4d-4e8a-9c3b-1d2e3f4a5b6c", "ironflow")
ENV = {owners.ENV_NAME: OWNER.name, owners.ENV_UID: OWNER.uid, owners.ENV_NAMESPACE: OWNER.namespace}


def managed(name: str = "p", **meta: Any) -> dict[str, Any]:
    labels_ = {labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE, labels.LABEL_COMPONENT: "claude-runner"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels_, **meta}, "spec": {}}


def test_the_three_variables_name_the_worker_pod() -> None:
    assert owners.owner_from_env({**ENV, "HOME": "/root"}) == OWNER


def test_no_variable_means_outside_a_cluster() -> None:
    assert owners.owner_from_env({"HOME": "/root"}) is None
    assert owners.owner_from_env({owners.ENV_NAME: " ", owners.ENV_UID: ""}) is None


@pytest.mark.parametrize("missing", [owners.ENV_NAME, owners.ENV_UID, owners.ENV_NAMESPACE])
def test_a_partial_set_is_refused_naming_what_is_missing(missing: str) -> None:
    env = {k: v for k, v in ENV.items() if k != missing}
    with pytest.raises(errors.ConfigError, match=f"^{missing} unset while"):
        owners.owner_from_env(env)


def test_in_its_own_namespace_an_object_is_owned_by_the_worker_pod_and_labelled() -> None:
    out = owners.stamp(managed(), "ironflow", OWNER)
    meta = out["metadata"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": OWNER.name,
            "uid": OWNER.uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }
    ]
    assert meta["labels"][labels.LABEL_WORKER_UID] == OWNER.uid
    assert out["spec"] == {}
    assert meta["name"] == "p"


def test_never_an_owner_across_namespaces_only_the_label() -> None:
    """A dependent naming an owner in another namespace would be garbage-collected at once."""
    for namespace in ("ironflow-agents", None):  # another namespace; a cluster-scoped object
        meta = owners.stamp(managed(), namespace, OWNER)["metadata"]
        assert "ownerReferences" not in meta
        assert meta["labels"][labels.LABEL_WORKER_UID] == OWNER.uid


def test_an_object_ironflow_does_not_manage_is_left_as_it_is() -> None:
    foreign = {"metadata": {"name": "scripts", "labels": {labels.LABEL_MANAGED_BY: "helm"}}}
    bare = {"metadata": {"name": "scripts"}}
    for body in (foreign, bare, {"kind": "Status"}):
        assert owners.stamp(body, "ironflow", OWNER) is body


def test_without_an_owner_nothing_is_stamped() -> None:
    body = managed()
    assert owners.stamp(body, "ironflow", None) is body


def test_the_callers_body_is_not_changed_and_its_owners_are_kept() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-uid", "controller": True}
    stale = {**OWNER.reference(), "name": "old-name"}  # the same pod named twice is one reference
    body = managed(ownerReferences=[job, stale])
    before = copy.deepcopy(body)
    out = owners.stamp(body, "ironflow", OWNER)
    assert body == before
    assert out["metadata"]["ownerReferences"] == [job, OWNER.reference()]


def test_a_caller_label_cannot_claim_another_workers_uid() -> None:
    body = managed()
    body["metadata"]["labels"][labels.LABEL_WORKER_UID] = "someone-else"
    assert owners.stamp(body, "ironflow-agents", OWNER)["metadata"]["labels"][labels.LABEL_WORKER_UID] == OWNER.uid
    assert labels.is_reserved_label(labels.LABEL_WORKER_UID)


def test_a_pod_uid_is_a_valid_label_value() -> None:
    assert labels.is_valid_label_value(OWNER.uid)


def test_the_docstring_examples_hold() -> None:
    result = doctest.testmod(owners)
    assert result.attempted > 0
    assert result.failed == 0
