"""A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok (the fake kubelet) and the agent-sandbox controller, on loopback.

Why: a fake API cannot prove that our pods pass PodSecurity ``restricted``, that the worker
Role is enough and no more, or that the Job controller and garbage collector do what we
expect. The binaries are built from pinned Go modules by ``scripts/kube-testenv`` into
``${XDG_CACHE_HOME:-~/.cache}/ironflow/kube-testenv/<versions>/`` (or ``$IRONFLOW_KUBE_TESTENV_BIN``).

What it guarantees: every process runs in its own process group on 127.0.0.1 only, with a
fresh PKI (:mod:`._kubeenv_pki`); the RBAC authorizer and the default admission plugins
(PodSecurity among them) are on; :meth:`KubeEnv.stop` kills every group and removes the work
dir, so nothing is left running. Pods never really run: kwok's stages (:mod:`._kwok_stages`)
move them, and kwok serves the container logs a test prepares (:meth:`KubeEnv.set_namespace_log`).

This module is the facade (lifecycle and what tests use); the binaries are found by
:mod:`._kubeenv_bins`, the command lines rendered by :mod:`._kubeenv_argv`, the processes run by
:mod:`._kubeenv_procs`.

The lifecycle is synchronous on purpose, so one session-wide cluster outlives the
per-test event loops; tests talk to it through :meth:`KubeEnv.cluster_config`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import shutil
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import yaml

from ironflow.kube import api
from ironflow.testing import _kubeenv_argv as argv
from ironflow.testing import _kubeenv_pki as pki
from ironflow.testing import _kwok_stages as stages
from ironflow.testing._kubeenv_bins import KubeEnvNotAvailable, find_bin_dir
from ironflow.testing._kubeenv_procs import KubeEnvError, Processes
from ironflow.testing.ports import free_port

__all__ = [
    "EXIT_CODE_LABEL",
    "EXIT_REASON_LABEL",
    "MANUAL_NAMESPACE_PREFIX",
    "NODE_NAME",
    "RUN_FOR_LABEL",
    "WAITING_MESSAGE",
    "WAITING_REASON_LABEL",
    "KubeEnv",
    "KubeEnvError",
    "KubeEnvNotAvailable",
    "find_bin_dir",
]

EXIT_CODE_LABEL: Final = stages.EXIT_CODE_LABEL
RUN_FOR_LABEL: Final = stages.RUN_FOR_LABEL
EXIT_REASON_LABEL: Final = stages.EXIT_REASON_LABEL
WAITING_REASON_LABEL: Final = stages.WAITING_REASON_LABEL
WAITING_MESSAGE: Final = stages.WAITING_MESSAGE
MANUAL_NAMESPACE_PREFIX: Final = stages.MANUAL_NAMESPACE_PREFIX

#: Name of the one fake node kwok manages.
NODE_NAME: Final = "kwok-node-0"
_NODE_CAPACITY: Final = {"cpu": "1k", "memory": "1Ti", "ephemeral-storage": "1Ti", "pods": "1M"}


class KubeEnv:
    """One real control plane. ``with KubeEnv() as env:`` (or ``start()``/``stop()``).

    >>> with KubeEnv() as env:  # doctest: +SKIP
    ...     env.create_namespace("demo", labels={"pod-security.kubernetes.io/enforce": "restricted"})
    ...     cfg = env.cluster_config()
    """

    #: Addresses the API server's certificate serves besides 127.0.0.1 (a real node adds its own).
    SERVING_IPS: tuple[str, ...] = ()

    def __init__(self, *, bin_dir: Path | None = None, agent_sandbox: bool = True) -> None:
        self.bin_dir = bin_dir or find_bin_dir()
        self.share_dir = self.bin_dir.parent / "share"
        self.agent_sandbox = agent_sandbox
        self.workdir: Path | None = None
        self.api_port = 0
        self.kwok_port = 0
        self._pki: pki.Pki | None = None
        self._procs = Processes(self.bin_dir)
        self._ssl: ssl.SSLContext | None = None
        self._volumes = 0

    def __repr__(self) -> str:
        return f"KubeEnv(api=https://127.0.0.1:{self.api_port}, running={len(self._procs)})"

    # --- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def server(self) -> str:
        """The apiserver URL."""
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def pids(self) -> list[int]:
        """Process ids (each the leader of its own process group) of the running components."""
        return self._procs.pids

    def stopped(self, component: str) -> contextlib.AbstractContextManager[None]:
        """``component`` (``kwok``, ``kube-scheduler``...) held stopped for a ``with`` block: a test of what
        a controller does with the events that piled up while it lagged."""
        return self._procs.stopped(component)

    def start(self) -> None:
        """Generate the PKI, start every component, wait until pods can be scheduled and run.

        Call it from a thread that outlives the cluster (the main thread): the components are
        killed when the thread that started them exits."""
        self.workdir = Path(tempfile.mkdtemp(prefix="ironflow-kubeenv-"))
        atexit.register(self.stop)
        try:
            self._write_files()
            self._start_apiserver(self._start_etcd())
            kwok_crds = self.share_dir / "kwok" / "crds"
            self.install_crds(sorted([*kwok_crds.glob("*logs.yaml"), *kwok_crds.glob("*execs.yaml")]))
            self.apply_objects(stages.manual_namespace_policy())  # before the scheduler starts
            self._start_controllers()
            self.request("POST", "/api/v1/nodes", self._node())
            self._procs.wait(self._node_schedulable, "node", "kwok to make the node Ready and KCM to untaint it")
            self._procs.wait(
                lambda: self._exists("/api/v1/namespaces/default/serviceaccounts/default"), "kcm", "default SA"
            )
            if self.agent_sandbox:
                self.install_crds(sorted((self.share_dir / "agent-sandbox" / "crds").glob("*.yaml")))
                self._spawn("agent-sandbox-controller", argv.agent_sandbox_args(self._layout))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM every process group (newest first), SIGKILL what is left, remove the work dir."""
        self._procs.stop()
        atexit.unregister(self.stop)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    # --- what tests use -----------------------------------------------------------------

    def cluster_config(self) -> api.KubeconfigInline:
        """An :mod:`ironflow.kube.api` cluster config for the admin (``system:masters``)."""
        return self.user_config(pki.ADMIN_USER, ["system:masters"])

    def user_config(self, user: str, groups: Sequence[str] = ()) -> api.KubeconfigInline:
        """A cluster config that authenticates as ``user`` in ``groups`` (a fresh client cert)."""
        p = self._need_pki()
        return api.KubeconfigInline(
            pki.kubeconfig_yaml(self.server, p.ca.cert_pem, user=user, client=p.client(user, groups))
        )

    def token_config(self, token: str) -> api.KubeconfigInline:
        """A cluster config that authenticates with a bearer token (e.g. a ServiceAccount's)."""
        return api.KubeconfigInline(
            pki.kubeconfig_yaml(self.server, self._need_pki().ca.cert_pem, user="token", token=token)
        )

    def service_account_token(self, namespace: str, name: str, *, seconds: int = 3600) -> str:
        """A short-lived token of a ServiceAccount, through the TokenRequest API."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        out = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
        return str(out["status"]["token"])

    def create_namespace(
        self, name: str, *, labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
    ) -> None:
        """Create a namespace and wait for its ``default`` ServiceAccount (pods need it)."""
        meta = {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})}
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
        self.request("POST", "/api/v1/namespaces", body)
        self._procs.wait(
            lambda: self._exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), "kcm", f"SA in {name}"
        )

    def apply_objects(
        self, docs: Sequence[Mapping[str, Any]], *, namespace: str | None = None, dry_run: bool = False
    ) -> list[dict[str, Any]]:
        """Create each object (server-side apply, so a rerun is harmless) with the admin identity.

        ``dry_run``: the server validates and admits each object (``dryRun=All``) and stores
        nothing. Returns the objects as the server answered them.
        """
        answers = []
        for doc in docs:
            meta = doc.get("metadata", {})
            ns = meta.get("namespace") or namespace
            path = self._object_path(doc, ns) + ("?dryRun=All" if dry_run else "")
            answers.append(self.request("PATCH", path, doc, content_type="application/apply-patch+yaml"))
        return answers

    def set_namespace_log(self, namespace: str, text: str) -> Path:
        """Make kwok serve ``text`` as the log of every container of every pod in ``namespace``
        (a ``ClusterLogs`` rule over a CRI-format file). Returns the file, to append to."""
        return self._log_rule("ClusterLogs", namespace, None, text)

    def set_pod_log(self, namespace: str, pod: str, text: str) -> Path:
        """Make kwok serve ``text`` as the log of every container of one pod (a ``Logs`` rule)."""
        return self._log_rule("Logs", namespace, pod, text)

    def allow_exec(self, namespace: str, work_dir: Path, env: Mapping[str, str] | None = None) -> None:
        """Let ``pods/exec`` work in ``namespace``: kwok then runs the command **on this host**,
        as kwok's user, in ``work_dir`` with ``env`` added (e.g. ``HOME``: the sandbox's emptyDir
        home); a ``ClusterExec`` rule scoped to that namespace only, since anyone allowed
        ``pods/exec`` there can run host commands."""
        local: dict[str, Any] = {"workDir": str(work_dir)}
        if env:
            local["envs"] = [{"name": k, "value": v} for k, v in env.items()]
        doc = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterExec",
            "metadata": {"name": f"exec-{namespace}"},
            "spec": {"selector": {"matchNamespaces": [namespace]}, "execs": [{"containers": [], "local": local}]},
        }
        self.apply_objects([doc])

    def provide_volumes(self, count: int, *, capacity: str = "10Gi") -> list[str]:
        """Create ``count`` unclassed PersistentVolumes for PVCs to bind to (no provisioner
        runs here; pods never mount them, so the hostPath is never touched)."""
        names = []
        for _ in range(count):
            self._volumes += 1
            name = f"kubeenv-pv-{self._volumes}"
            body = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": capacity},
                    "accessModes": ["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/nonexistent/kubeenv/{name}"},
                },
            }
            self.request("POST", "/api/v1/persistentvolumes", body)
            names.append(name)
        return names

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> dict[str, Any]:
        """One admin request; a non-2xx answer raises :class:`KubeEnvError` with its message."""
        data = None
        if body is not None:
            data = (yaml.safe_dump(body) if "yaml" in content_type else json.dumps(body)).encode()
        apply = ("&" if "?" in path else "?") + "fieldManager=kubeenv&force=true"
        url = self.server + path + (apply if "apply-patch" in content_type else "")
        # always https to our own loopback apiserver
        req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content_type})  # noqa: S310
        try:
            with urllib.request.urlopen(req, context=self._context(), timeout=30) as resp:  # noqa: S310
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            raise KubeEnvError(f"{method} {path}: HTTP {exc.code}: {detail}") from exc
        return dict(json.loads(raw)) if raw.strip().startswith(b"{") else {}

    # --- internals ----------------------------------------------------------------------

    def _need_pki(self) -> pki.Pki:
        if self._pki is None:
            raise KubeEnvError("KubeEnv is not started: use `with KubeEnv() as env:` or call start()")
        return self._pki

    @property
    def _layout(self) -> argv.Layout:
        assert self.workdir is not None
        return argv.Layout(self.workdir)

    def _path(self, name: str) -> Path:
        return self._layout.path(name)

    @property
    def kubeconfig_path(self) -> Path:
        """The admin kubeconfig file (client certificate by path), for Go tools and other clients."""
        return self._layout.kubeconfig

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self._path("ca.crt")))
            ctx.load_cert_chain(str(self._path("admin.crt")), str(self._path("admin.key")))
            self._ssl = ctx
        return self._ssl

    def _write_files(self) -> None:
        self._pki = p = pki.new_pki(extra_ips=self.SERVING_IPS)
        self._ssl = None
        self._choose_ports()
        files = {
            "ca.crt": p.ca.cert_pem,
            "admin.crt": p.admin.cert_pem,
            "admin.key": p.admin.key_pem,
            "sa.key": p.service_account_key_pem,
            "sa.pub": p.service_account_public_pem,
        }
        for name, content in files.items():
            self._path(name).write_bytes(content)
            self._path(name).chmod(0o600)
        paths = (str(self._path("admin.crt")), str(self._path("admin.key")))
        text = pki.kubeconfig_yaml(self.server, p.ca.cert_pem, user=pki.ADMIN_USER, cert_paths=paths)
        self.kubeconfig_path.write_text(text)
        stock = [
            d
            for f in sorted((self.share_dir / "kwok" / "stages").glob("*.yaml"))
            for d in yaml.safe_load_all(f.read_text())
            if d
        ]
        self._path("kwok.yaml").write_text(stages.kwok_config(stock))
        self._path("logs").mkdir()
        self._path("pod-logs").mkdir()

    def _choose_ports(self) -> None:
        self.api_port, self.kwok_port = free_port(), free_port()

    def _spawn(self, name: str, args: list[str]) -> None:
        assert self.workdir is not None
        self._procs.spawn(name, args, cwd=self.workdir, log_dir=self._path("logs"))

    def _start_etcd(self) -> str:
        """Start etcd and wait until it is healthy; returns its client URL."""
        client, peer = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client}"
        self._spawn("etcd", argv.etcd_args(self._layout, client_url=etcd_url, peer_port=peer))

        def healthy() -> bool:
            with urllib.request.urlopen(f"{etcd_url}/health", timeout=2) as resp:  # noqa: S310
                return bool(resp.status == 200)

        self._procs.wait(healthy, "etcd", "etcd /health")
        return etcd_url

    def _start_apiserver(self, etcd_url: str) -> None:
        self._spawn("kube-apiserver", argv.apiserver_args(self._layout, etcd_url=etcd_url, port=self.api_port))
        self._procs.wait(lambda: self.request("GET", "/readyz") is not None, "kube-apiserver", "kube-apiserver /readyz")

    def _start_controllers(self) -> None:
        self._spawn("kube-controller-manager", argv.controller_manager_args(self._layout, port=free_port()))
        self._spawn("kube-scheduler", argv.scheduler_args(self._layout, port=free_port()))
        self._spawn("kwok", argv.kwok_args(self._layout, port=self.kwok_port))

    def install_crds(self, files: Sequence[Path]) -> None:
        """Create the CRDs in ``files``; return once each served version is in discovery."""
        crds = []
        for f in files:
            for doc in yaml.safe_load_all(f.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    # create, not apply: the big CRDs exceed the last-applied annotation limit
                    self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
                    crds.append(doc)
        for crd in crds:
            name = crd["metadata"]["name"]
            self._procs.wait(
                functools.partial(self._crd_established, name), "kube-apiserver", f"CRD {name} Established"
            )
            # Established is not yet discoverable: a controller started now may find no kind in its
            # REST mapping and exit ("no matches for kind"), so wait until discovery serves it too.
            for version in (v["name"] for v in crd["spec"]["versions"] if v.get("served")):
                self._procs.wait(
                    functools.partial(self._crd_discoverable, crd["spec"]["group"], version, crd["spec"]["names"]),
                    "kube-apiserver",
                    f"CRD {name} {version} in discovery",
                )

    def _crd_established(self, name: str) -> bool:
        crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conds = crd.get("status", {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conds)

    def _crd_discoverable(self, group: str, version: str, names: dict[str, Any]) -> bool:
        try:
            listed = self.request("GET", f"/apis/{group}/{version}").get("resources") or []
        except KubeEnvError:
            return False
        return any(r.get("name") == names["plural"] for r in listed)

    def _exists(self, path: str) -> bool:
        try:
            self.request("GET", path)
        except KubeEnvError:
            return False
        return True

    def _node(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME, "type": "kwok"}},
            "status": {
                # kwok's own defaults plus what it leaves out: a real node reports ephemeral storage,
                # and an agent pod requests some (kube-scheduler refuses a node with none).
                "capacity": dict(_NODE_CAPACITY),
                "allocatable": dict(_NODE_CAPACITY),
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": "localhost"},
                ],
            },
        }

    def _node_schedulable(self) -> bool:
        node = self.request("GET", f"/api/v1/nodes/{NODE_NAME}")
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", [])
        )
        return ready and not node.get("spec", {}).get("taints")

    def _object_path(self, doc: Mapping[str, Any], namespace: str | None) -> str:
        version = str(doc["apiVersion"])
        kind = str(doc["kind"]).lower()
        plural = (  # enough for the kinds tests apply (Logs, Sandbox, NetworkPolicy, RuntimeClass, ...)
            kind + "es"
            if kind.endswith("ss")
            else kind
            if kind.endswith("s")
            else kind + "es"
            if kind.endswith("x")
            else kind[:-1] + "ies"
            if kind.endswith("y")
            else kind + "s"
        )
        base = f"/apis/{version}" if "/" in version else f"/api/{version}"
        ns = f"/namespaces/{namespace}" if namespace else ""
        return f"{base}{ns}/{plural}/{doc['metadata']['name']}"

    def _log_rule(self, kind: str, namespace: str, pod: str | None, text: str) -> Path:
        name = f"{namespace}.{pod}" if pod else namespace
        path = self._path("pod-logs") / f"{name}.log"
        path.write_text(stages.cri_log(text))
        self._log_rule_file(kind, namespace, pod, path)
        return path

    def _log_rule_file(self, kind: str, namespace: str, pod: str | None, path: Path) -> None:
        spec: dict[str, Any] = {"logs": [{"containers": [], "logsFile": str(path), "follow": True}]}
        meta: dict[str, Any] = {"name": pod or namespace}
        if kind == "ClusterLogs":
            spec["selector"] = {"matchNamespaces": [namespace]}
        else:
            meta["namespace"] = namespace
        doc = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}
        self.apply_objects([doc])

    @contextlib.contextmanager
    def namespace(self, name: str, *, labels: Mapping[str, str] | None = None) -> Iterator[str]:
        """A namespace for one test, deleted afterwards (without waiting)."""
        self.create_namespace(name, labels=labels)
        try:
            yield name
        finally:
            with contextlib.suppress(KubeEnvError, OSError):
                self.request("DELETE", f"/api/v1/namespaces/{name}")
