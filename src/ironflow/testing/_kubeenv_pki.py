"""PKI and kubeconfigs for :mod:`ironflow.testing.kubeenv`: a CA, one admin certificate, client
certificates for RBAC tests, and kubeconfig text. Pure: values in, PEM bytes and YAML out.

Why one admin certificate: as in kwokctl, it serves as the apiserver's and kwok's serving
certificate and as every component's client certificate (``O=system:masters``); tests that
must *not* be admin get their own client certificate or a ServiceAccount token.
Keys are ECDSA P-256 (fast to generate; the apiserver accepts them for serving, client auth
and service-account signing). Nothing here is used outside tests.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ADMIN_USER", "CertPair", "Pki", "kubeconfig_yaml", "new_pki"]

#: The admin identity every component uses (cluster-admin through ``system:masters``).
ADMIN_USER: Final = "ironflow-kubeenv-admin"
_VALIDITY: Final = datetime.timedelta(days=2)  # a test cluster lives minutes; short is safer
_SANS_DNS: Final = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")


@dataclass(frozen=True)
class CertPair:
    """A PEM certificate and its PEM private key (the key is never shown by ``repr``)."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)


@dataclass(frozen=True)
class Pki:
    """The cluster's CA, the admin pair, and the service-account signing key."""

    ca: CertPair
    admin: CertPair
    service_account_key_pem: bytes = field(repr=False)

    @property
    def service_account_public_pem(self) -> bytes:
        """The verification key (the apiserver wants the public half in its own file)."""
        key = serialization.load_pem_private_key(self.service_account_key_pem, password=None)
        return key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def client(self, user: str, groups: Sequence[str] = ()) -> CertPair:
        """A client certificate for ``user`` in ``groups``, signed by the CA (for RBAC tests)."""
        return _leaf(self.ca, user, groups, server=False)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, groups: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    return x509.Name(attrs)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)  # clock skew margin


def _new_ca() -> CertPair:
    key = _key()
    name = _name("ironflow-kubeenv-ca")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return CertPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _leaf(
    ca: CertPair,
    common_name: str,
    groups: Sequence[str],
    *,
    server: bool,
    extra_ips: Sequence[str] = (),
    extra_dns: Sequence[str] = (),
) -> CertPair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, groups))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if server:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in (*_SANS_DNS, *extra_dns)]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", *extra_ips)]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return CertPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_pki(extra_ips: Sequence[str] = (), extra_dns: Sequence[str] = ()) -> Pki:
    """A fresh CA, admin pair (``system:masters``, serving on localhost/127.0.0.1 and
    ``extra_ips``: the real node's address and the ``kubernetes`` Service's; and on the names
    ``extra_dns``, e.g. an in-cluster test server's) and SA key."""
    ca = _new_ca()
    admin = _leaf(ca, ADMIN_USER, ["system:masters"], server=True, extra_ips=extra_ips, extra_dns=extra_dns)
    return Pki(ca=ca, admin=admin, service_account_key_pem=_key_pem(_key()))


def kubeconfig_yaml(
    server: str,
    ca_pem: bytes,
    *,
    user: str,
    client: CertPair | None = None,
    token: str | None = None,
    cert_paths: tuple[str, str] | None = None,
) -> str:
    """Kubeconfig text with one context (named ``user``): a client certificate (inline, or as
    file paths for the Go components), or a bearer token.

    >>> "token: t" in kubeconfig_yaml("https://127.0.0.1:1", b"x", user="u", token="t")
    True
    """
    creds: dict[str, str] = {}
    if cert_paths is not None:
        creds = {"client-certificate": cert_paths[0], "client-key": cert_paths[1]}
    elif client is not None:
        creds = {
            "client-certificate-data": base64.b64encode(client.cert_pem).decode(),
            "client-key-data": base64.b64encode(client.key_pem).decode(),
        }
    elif token is not None:
        creds = {"token": token}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kubeenv",
                "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()},
            }
        ],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": user, "context": {"cluster": "kubeenv", "user": user}}],
        "current-context": user,
    }
    return yaml.safe_dump(doc, sort_keys=False)
