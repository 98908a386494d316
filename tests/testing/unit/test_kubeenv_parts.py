"""The pure parts of the real-control-plane test environment: PKI, kubeconfigs, kwok stages,
CRI log lines and the statuses the test's kubelet reports."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from tests.fakes.kubelet import KubeletControl, pod_status

from ironflow.testing import _kubeenv_pki as pki
from ironflow.testing import _kwok_stages as stages
from ironflow.testing._kubeenv_bins import CSI_BINARIES, find_csi_bin_dir
from ironflow.testing.kubeenv import KubeEnvNotAvailable, find_bin_dir


@pytest.fixture(scope="module")
def the_pki() -> pki.Pki:
    return pki.new_pki()


def _verify(cert: x509.Certificate, ca: x509.Certificate) -> None:
    key = ca.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    assert cert.signature_hash_algorithm is not None
    key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))


def test_admin_certificate_is_a_system_masters_loopback_server_cert(the_pki: pki.Pki) -> None:
    ca = x509.load_pem_x509_certificate(the_pki.ca.cert_pem)
    admin = x509.load_pem_x509_certificate(the_pki.admin.cert_pem)
    _verify(admin, ca)
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    sans = admin.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    usages = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages


def test_client_certificate_carries_user_and_groups_and_cannot_serve(the_pki: pki.Pki) -> None:
    pair = the_pki.client("alice", ["team-a", "team-b"])
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    _verify(cert, x509.load_pem_x509_certificate(the_pki.ca.cert_pem))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["team-a", "team-b"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH not in usages


def test_private_keys_never_show_in_repr(the_pki: pki.Pki) -> None:
    assert b"PRIVATE KEY" in the_pki.admin.key_pem
    assert "PRIVATE" not in repr(the_pki)
    assert "PRIVATE" not in repr(the_pki.admin)


def test_kubeconfig_has_one_context_with_the_chosen_credentials(the_pki: pki.Pki) -> None:
    inline = yaml.safe_load(pki.kubeconfig_yaml("https://127.0.0.1:6443", b"CA", user="u", client=the_pki.admin))
    assert inline["current-context"] == "u"
    assert inline["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert set(inline["users"][0]["user"]) == {"client-certificate-data", "client-key-data"}
    by_path = yaml.safe_load(pki.kubeconfig_yaml("https://x", b"CA", user="u", cert_paths=("/c", "/k")))
    assert by_path["users"][0]["user"] == {"client-certificate": "/c", "client-key": "/k"}
    token = yaml.safe_load(pki.kubeconfig_yaml("https://x", b"CA", user="t", token="abc"))
    assert token["users"][0]["user"] == {"token": "abc"}


def _stock() -> list[dict[str, Any]]:
    def stage(name: str, kind: str) -> dict[str, Any]:
        return {"kind": "Stage", "metadata": {"name": name}, "spec": {"resourceRef": {"kind": kind}, "selector": {}}}

    return [
        stage("node-initialize", "Node"),
        stage("pod-ready", "Pod"),
        stage("pod-complete", "Pod"),
        stage("pod-delete", "Pod"),
    ]


def _exprs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["spec"].get("selector", {}).get("matchExpressions", []))


def test_kwok_config_scopes_pod_stages_and_adds_exit_deadline_and_waiting() -> None:
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(stages.kwok_config(_stock()))}
    assert list(docs) == [
        "node-initialize",
        "pod-ready",
        "pod-complete",
        "pod-delete",
        "ironflow-pod-exit",
        "ironflow-pod-deadline",
        "ironflow-pod-waiting",
    ]
    manual = [e for e in _exprs(docs["pod-ready"]) if "startswith" in e["key"]]
    assert manual
    assert manual[0]["operator"] == "NotIn"
    assert manual[0]["values"] == ["true"]
    assert _exprs(docs["node-initialize"]) == []  # node stages as shipped
    # Deletions finish in every namespace, but kwok never deletes again what the apiserver has.
    assert _exprs(docs["pod-delete"]) == [
        {"key": ".metadata.deletionGracePeriodSeconds | tostring", "operator": "NotIn", "values": ["0"]}
    ]
    assert any(
        stages.EXIT_CODE_LABEL in e["key"] and e["operator"] == "DoesNotExist" for e in _exprs(docs["pod-complete"])
    )
    assert docs["ironflow-pod-exit"]["spec"]["weight"] == docs["ironflow-pod-deadline"]["spec"]["weight"] == 1000
    assert stages.RUN_FOR_LABEL in docs["ironflow-pod-exit"]["spec"]["delay"]["durationFrom"]["expressionFrom"]
    assert "DeadlineExceeded" in docs["ironflow-pod-deadline"]["spec"]["next"]["statusTemplate"]
    # A pod labelled to wait is left Pending by pod-ready, for the waiting stage.
    assert any(
        stages.WAITING_REASON_LABEL in e["key"] and e["operator"] == "DoesNotExist" for e in _exprs(docs["pod-ready"])
    )
    assert any(stages.WAITING_REASON_LABEL in e["key"] for e in _exprs(docs["ironflow-pod-waiting"]))
    assert stages.EXIT_REASON_LABEL in docs["ironflow-pod-exit"]["spec"]["next"]["statusTemplate"]


def test_kwok_config_does_not_modify_the_stock_documents() -> None:
    stock = _stock()
    stages.kwok_config(stock)
    assert stock == _stock()


def test_cri_log_prefixes_every_line_and_keeps_empty_text_empty() -> None:
    at = datetime.datetime(2026, 11, 29, 8, 0, tzinfo=datetime.UTC)
    assert stages.cri_log("", at=at) == ""
    out = stages.cri_log('{"type":"result"}\nsecond line', at=at).splitlines()
    assert out == [
        '2026-11-29T08:00:00.000000000Z stdout F {"type":"result"}',
        "2026-11-29T08:00:00.000000000Z stdout F second line",
    ]


POD = {"spec": {"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "j"}]}}


def test_kubelet_status_running_then_terminated_per_container() -> None:
    running = pod_status(POD, "Running", exit_code=None, reason=None)
    assert running["phase"] == "Running"
    assert next(c["state"] for c in running["containerStatuses"]).keys() == {"running"}
    failed = pod_status(POD, "Failed", exit_code=3, reason="DeadlineExceeded")
    assert failed["reason"] == "DeadlineExceeded"
    assert {c["state"]["terminated"]["exitCode"] for c in failed["containerStatuses"]} == {3}
    ok = pod_status(POD, "Succeeded", exit_code=None, reason=None)
    assert ok["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert pod_status(POD, "Pending", exit_code=None, reason=None) == {"phase": "Pending"}


def test_kubelet_control_refuses_a_namespace_kwok_drives() -> None:
    with pytest.raises(ValueError, match=stages.MANUAL_NAMESPACE_PREFIX):
        KubeletControl(object(), "default")  # type: ignore[arg-type]


def test_missing_binaries_name_the_build_command(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRONFLOW_KUBE_TESTENV_BIN", str(tmp_path))
    with pytest.raises(KubeEnvNotAvailable, match="scripts/kube-testenv build"):
        find_bin_dir()


def test_the_csi_dir_counts_only_with_every_binary_and_the_snapshot_crds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IRONFLOW_KUBE_TESTENV_CSI_BIN", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    bin_dir = tmp_path / "ironflow" / "kube-testenv" / "csi_provisioner-5.3.0_snapshotter-8.7.0" / "bin"
    bin_dir.mkdir(parents=True)
    for name in CSI_BINARIES:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    with pytest.raises(KubeEnvNotAvailable, match="run scripts/kube-testenv build --csi"):
        find_csi_bin_dir()  # no CRDs beside the binaries: a half-built dir is passed over
    (bin_dir.parent / "share" / "snapshot-crds").mkdir(parents=True)
    assert find_csi_bin_dir() == bin_dir
