"""The example set under ``examples/k8s/sandbox/`` as files (pure).

Every YAML file there is :func:`example_files` written out by ``scripts/render-examples``
(``python -m ironflow.cluster.examples DIR``); a unit test renders again and compares byte
for byte, so the examples and ``ironflow manifests`` cannot drift apart. The Claude
profile's Markdown and JSON files are hand-written; only their kustomization is rendered
from the list of files.

The top-level ``kustomization.yaml`` applies :data:`EXAMPLE_CONFIG`: plain
NetworkPolicies and the auth proxy (agents reach only the proxy), the two presets and the
example profile. Cilium, gVisor, the direct-to-API variant and the check account are in
the directory, to swap in.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from ironflow.cluster import documents, network, proxy_address, service_network, session_network, setup, workloads

__all__ = [
    "AUTH_PROXY_FILE",
    "EXAMPLE_CONFIG",
    "PROFILE_DIR",
    "PROFILE_HOME",
    "example_files",
    "kustomize_resources",
    "namespaces_defined_in",
    "profile_kustomization",
]

EXAMPLE_CONFIG: Final = setup.ClusterSetup(auth_proxy_url=setup.DEFAULT_AUTH_PROXY_URL)
#: The proxy's Deployment, Service and PDB (:func:`ironflow.cluster.workloads.auth_proxy`);
#: listed in kustomization.yaml, and rendered, only when present.
AUTH_PROXY_FILE: Final = "auth-proxy.yaml"
PROFILE_DIR: Final = "claude-profile"
PROFILE_HOME: Final = "claude-home"
_KUSTOMIZE_API: Final = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}


def profile_kustomization(namespace: str, paths: Sequence[str]) -> documents.Document:
    """One configMapGenerator per directory of ``claude-home/``, name hash disabled.

    ``paths`` are relative to ``claude-home/``; the provider refers to the ConfigMaps by
    name (``claude-profile``, ``claude-profile-rules``...), hence no hash suffix.
    """
    by_dir: dict[str, list[str]] = {}
    for path in sorted(paths):
        by_dir.setdefault(path.rpartition("/")[0], []).append(f"{PROFILE_HOME}/{path}")
    generators = [{"name": setup.profile_configmap_name(d), "files": files} for d, files in by_dir.items()]
    body: dict[str, Any] = {
        **_KUSTOMIZE_API,
        "namespace": namespace,
        "generatorOptions": {"disableNameSuffixHash": True},
        "configMapGenerator": generators,
    }
    mapping = "\n".join(f'  .claude_profile_configmap_at("{setup.profile_configmap_name(d)}", "{d}")' for d in by_dir)
    comment = (
        f"A Claude profile: one ConfigMap per directory of {PROFILE_HOME}/ (a ConfigMap key\n"
        "cannot contain '/'). The name hash is disabled because the provider refers to\n"
        "the ConfigMaps by name:\n"
        f"{mapping}\n"
        "kustomize lists every file: regenerate with scripts/render-examples after\n"
        "adding one."
    )
    return documents.Document(body, comment)


def kustomize_resources(*, with_auth_proxy: bool) -> list[str]:
    """What the top-level kustomization applies for :data:`EXAMPLE_CONFIG`."""
    resources = [
        "namespace.yaml",
        "namespace-rbac.yaml",
        "networkpolicy-deny-all.yaml",
        "networkpolicy-egress-dns.yaml",
        "networkpolicy-egress-auth-proxy.yaml",
        "networkpolicy-service-pods.yaml",
        "networkpolicy-session-runtime.yaml",
        "managed-settings.yaml",
        PROFILE_DIR,
    ]
    return [*resources, AUTH_PROXY_FILE] if with_auth_proxy else resources


def _top_kustomization(*, with_auth_proxy: bool) -> documents.Document:
    proxy_note = (
        f"{AUTH_PROXY_FILE} (the proxy itself) is listed"
        if with_auth_proxy
        else f"Add {AUTH_PROXY_FILE} (the proxy itself) once you have it"
    )
    comment = (
        "The ironflow sandbox for one cluster: `kubectl apply -k examples/k8s/sandbox`.\n"
        "Agents reach only the auth proxy (plain NetworkPolicies). Alternatives here:\n"
        "  - Cilium: replace networkpolicy-egress-*.yaml with cilium-egress-auth-proxy.yaml\n"
        "    (or cilium-egress-anthropic.yaml without the proxy).\n"
        "  - No proxy, plain policies: networkpolicy-egress-anthropic.yaml instead of\n"
        "    networkpolicy-egress-auth-proxy.yaml (any public HTTPS host is then reachable).\n"
        "  - gVisor: add runtimeclass-gvisor.yaml (cluster-scoped, once per cluster).\n"
        "  - `ironflow check` with its own account: add check-rbac.yaml.\n"
        f"{proxy_note}.\n"
        "`ironflow manifests` renders the same set for other names."
    )
    body = {**_KUSTOMIZE_API, "resources": kustomize_resources(with_auth_proxy=with_auth_proxy)}
    return documents.Document(body, comment)


def namespaces_defined_in(text: str) -> frozenset[str]:
    """The Namespaces a YAML file (``auth-proxy.yaml``) creates itself, so namespace.yaml leaves them out."""
    docs = yaml.safe_load_all(text)
    return frozenset(str(d["metadata"]["name"]) for d in docs if isinstance(d, dict) and d.get("kind") == "Namespace")


def example_files(
    profile_paths: Sequence[str], *, with_auth_proxy: bool = False, namespaces_elsewhere: frozenset[str] = frozenset()
) -> list[documents.ManifestFile]:
    """Every rendered file of the example set, paths relative to ``examples/k8s/sandbox/``.

    ``namespaces_elsewhere``: Namespaces another file of the set creates (kustomize refuses
    one object twice).
    """
    config = EXAMPLE_CONFIG
    top = setup.topology(config)
    direct = network.Topology(top.namespace, top.worker_namespace, None, top.profiles)
    own_namespaces = [d for d in setup.namespaces(config) if d.body["metadata"]["name"] not in namespaces_elsewhere]
    files = {
        "namespace.yaml": own_namespaces,
        "namespace-rbac.yaml": setup.worker_rbac(config),
        "check-rbac.yaml": setup.check_rbac(config),
        "networkpolicy-deny-all.yaml": setup.deny_all(config),
        "networkpolicy-egress-dns.yaml": network.plain_dns(top),
        "networkpolicy-egress-anthropic.yaml": network.plain_anthropic(direct),
        "networkpolicy-egress-auth-proxy.yaml": network.plain_auth_proxy(top),
        "networkpolicy-service-pods.yaml": service_network.policies(config.namespace),
        "networkpolicy-session-runtime.yaml": session_network.policies(
            config.namespace, worker_namespace=config.worker_namespace, proxy_namespace=top.proxy_namespace
        ),
        "cilium-egress-anthropic.yaml": network.cilium_anthropic(direct),
        "cilium-egress-auth-proxy.yaml": network.cilium_auth_proxy(top),
        "runtimeclass-gvisor.yaml": setup.runtime_class(),
        "managed-settings.yaml": setup.managed_settings(config),
        f"{PROFILE_DIR}/kustomization.yaml": [profile_kustomization(config.namespace, profile_paths)],
        "kustomization.yaml": [_top_kustomization(with_auth_proxy=with_auth_proxy)],
    }
    proxy = config.auth_proxy
    if with_auth_proxy and isinstance(proxy, proxy_address.ProxyService):
        files[AUTH_PROXY_FILE] = workloads.auth_proxy(workloads.AuthProxyDeployment(), proxy)
    return [documents.ManifestFile(path, tuple(docs)) for path, docs in files.items()]


def _main(argv: list[str]) -> int:
    """``python -m ironflow.cluster.examples DIR``: (re)write the rendered files of DIR."""
    if len(argv) != 1:
        print("usage: python -m ironflow.cluster.examples examples/k8s/sandbox", file=sys.stderr)
        return 2
    root = Path(argv[0])
    home = root / PROFILE_DIR / PROFILE_HOME
    paths = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    proxy_file = root / AUTH_PROXY_FILE
    elsewhere = namespaces_defined_in(proxy_file.read_text(encoding="utf-8")) if proxy_file.is_file() else frozenset()
    for file in example_files(paths, with_auth_proxy=proxy_file.is_file(), namespaces_elsewhere=elsewhere):
        target = root / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(documents.file_text(file.documents), encoding="utf-8")
        print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
