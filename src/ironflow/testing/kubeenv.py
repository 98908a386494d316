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

The lifecycle is synchronous on purpose, so one session-wide cluster outlives the
per-test event loops; tests talk to it through :meth:`KubeEnv.cluster_config`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import yaml

from ironflow.kube import api
from ironflow.testing import _kubeenv_pki as pki
from ironflow.testing import _kwok_stages as stages

__all__ = [
    "EXIT_CODE_LABEL",
    "MANUAL_NAMESPACE_PREFIX",
    "RUN_FOR_LABEL",
    "KubeEnv",
    "KubeEnvError",
    "KubeEnvNotAvailable",
    "find_bin_dir",
]

EXIT_CODE_LABEL: Final = stages.EXIT_CODE_LABEL
RUN_FOR_LABEL: Final = stages.RUN_FOR_LABEL
MANUAL_NAMESPACE_PREFIX: Final = stages.MANUAL_NAMESPACE_PREFIX

BINARIES: Final = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "agent-sandbox-controller",
)
#: Name of the one fake node kwok manages.
NODE_NAME: Final = "kwok-node-0"
_START_TIMEOUT_S: Final = 120.0
_STOP_GRACE_S: Final = 2.0  # kube-apiserver drains watches for far longer; test data need no drain
_PR_SET_PDEATHSIG: Final = 1


class KubeEnvNotAvailable(RuntimeError):
    """The binaries are not built: run ``scripts/kube-testenv build``."""


class KubeEnvError(RuntimeError):
    """A component did not start or an admin request failed; the message names the component
    and the tail of its log."""


def find_bin_dir() -> Path:
    """Where the built binaries are: ``$IRONFLOW_KUBE_TESTENV_BIN``, else the newest complete
    ``kube-testenv/*/bin`` in the cache. Raises :class:`KubeEnvNotAvailable` with the fix."""
    override = os.environ.get("IRONFLOW_KUBE_TESTENV_BIN")
    candidates: list[Path] = []
    if override:
        candidates.append(Path(override))
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ironflow" / "kube-testenv"
        candidates += sorted(cache.glob("*/bin"), key=lambda p: p.stat().st_mtime, reverse=True)
    for directory in candidates:
        share = directory.parent / "share"
        if all(os.access(directory / b, os.X_OK) for b in BINARIES) and (share / "kwok" / "crds").is_dir():
            return directory
    where = override or "the kube-testenv cache"
    raise KubeEnvNotAvailable(f"control-plane binaries not found in {where}: run scripts/kube-testenv build")


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it exits (Linux), so a
    crashed or killed test run leaves no component behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class KubeEnv:
    """One real control plane. ``with KubeEnv() as env:`` (or ``start()``/``stop()``).

    >>> with KubeEnv() as env:  # doctest: +SKIP
    ...     env.create_namespace("demo", labels={"pod-security.kubernetes.io/enforce": "restricted"})
    ...     cfg = env.cluster_config()
    """

    def __init__(self, *, bin_dir: Path | None = None, agent_sandbox: bool = True) -> None:
        self.bin_dir = bin_dir or find_bin_dir()
        self.share_dir = self.bin_dir.parent / "share"
        self.agent_sandbox = agent_sandbox
        self.workdir: Path | None = None
        self.api_port = 0
        self.kwok_port = 0
        self._pki: pki.Pki | None = None
        self._procs: list[_Proc] = []
        self._ssl: ssl.SSLContext | None = None
        self._volumes = 0

    def __repr__(self) -> str:
        return f"KubeEnv(api=https://127.0.0.1:{self.api_port}, running={len(self._procs)})"

    # --- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> KubeEnv:
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
        return [p.popen.pid for p in self._procs]

    def start(self) -> None:
        """Generate the PKI, start every component, wait until pods can be scheduled and run.

        Call it from a thread that outlives the cluster (the main thread): the components are
        killed when the thread that started them exits."""
        self.workdir = Path(tempfile.mkdtemp(prefix="ironflow-kubeenv-"))
        atexit.register(self.stop)
        try:
            self._write_files()
            self._start_etcd()
            self._start_apiserver()
            kwok_crds = self.share_dir / "kwok" / "crds"
            self._install_crds(sorted([*kwok_crds.glob("*logs.yaml"), *kwok_crds.glob("*execs.yaml")]))
            self._start_controllers()
            self.request("POST", "/api/v1/nodes", self._node())
            self._wait(self._node_schedulable, "node", "kwok to make the node Ready and KCM to untaint it")
            self._wait(lambda: self._exists("/api/v1/namespaces/default/serviceaccounts/default"), "kcm", "default SA")
            if self.agent_sandbox:
                self._install_crds(sorted((self.share_dir / "agent-sandbox" / "crds").glob("*.yaml")))
                self._spawn(
                    "agent-sandbox-controller",
                    [
                        f"--kubeconfig={self.kubeconfig_path}",
                        "--leader-elect=false",
                        "--metrics-bind-address=0",
                        "--health-probe-bind-address=0",
                        "--extensions",
                    ],
                )
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM every process group (newest first), SIGKILL what is left, remove the work dir."""
        for proc in reversed(self._procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        for proc in reversed(self._procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)  # the group: children die too
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)
        self._procs.clear()
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
        self._wait(lambda: self._exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), "kcm", f"SA in {name}")

    def apply_objects(self, docs: Sequence[Mapping[str, Any]], *, namespace: str | None = None) -> None:
        """Create each object (server-side apply, so a rerun is harmless) with the admin identity."""
        for doc in docs:
            meta = doc.get("metadata", {})
            ns = meta.get("namespace") or namespace
            self.request("PATCH", self._object_path(doc, ns), doc, content_type="application/apply-patch+yaml")

    def set_namespace_log(self, namespace: str, text: str) -> Path:
        """Make kwok serve ``text`` as the log of every container of every pod in ``namespace``
        (a ``ClusterLogs`` rule over a CRI-format file). Returns the file, to append to."""
        return self._log_rule("ClusterLogs", namespace, None, text)

    def set_pod_log(self, namespace: str, pod: str, text: str) -> Path:
        """Make kwok serve ``text`` as the log of every container of one pod (a ``Logs`` rule)."""
        return self._log_rule("Logs", namespace, pod, text)

    def allow_exec(self, namespace: str, work_dir: Path) -> None:
        """Let ``pods/exec`` work in ``namespace``: kwok then runs the command **on this host**,
        as kwok's user, in ``work_dir`` (a ``ClusterExec`` rule scoped to that namespace only,
        since anyone allowed ``pods/exec`` there can run host commands)."""
        doc = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterExec",
            "metadata": {"name": f"exec-{namespace}"},
            "spec": {
                "selector": {"matchNamespaces": [namespace]},
                "execs": [{"containers": [], "local": {"workDir": str(work_dir)}}],
            },
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
        url = self.server + path + ("?fieldManager=kubeenv&force=true" if "apply-patch" in content_type else "")
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

    def _path(self, name: str) -> Path:
        assert self.workdir is not None
        return self.workdir / name

    @property
    def kubeconfig_path(self) -> Path:
        """The admin kubeconfig file (client certificate by path), for Go tools and other clients."""
        return self._path("admin.kubeconfig")

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self._path("ca.crt")))
            ctx.load_cert_chain(str(self._path("admin.crt")), str(self._path("admin.key")))
            self._ssl = ctx
        return self._ssl

    def _write_files(self) -> None:
        self._pki = p = pki.new_pki()
        self._ssl = None
        self.api_port, self.kwok_port = _free_port(), _free_port()
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

    def _spawn(self, name: str, args: list[str]) -> _Proc:
        log = self._path("logs") / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                [str(self.bin_dir / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,  # its own process group: stop() kills it and its children
                preexec_fn=_die_with_parent,  # only a prctl call: safe between fork and exec
            )
        proc = _Proc(name, popen, log)
        self._procs.append(proc)
        return proc

    def _wait(self, ready: Any, component: str, what: str, timeout: float = _START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for proc in self._procs:
                if proc.popen.poll() is not None:
                    raise KubeEnvError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}")
            with contextlib.suppress(OSError, KubeEnvError, ValueError):
                if ready():
                    return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {p.name}\n{p.tail(8)}" for p in self._procs if p.name == component)
                raise KubeEnvError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
            time.sleep(0.1)

    def _start_etcd(self) -> None:
        client, peer = _free_port(), _free_port()
        self._etcd_url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                "--name=node0",
                f"--data-dir={self._path('etcd')}",
                f"--listen-client-urls={self._etcd_url}",
                f"--advertise-client-urls={self._etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=node0=http://127.0.0.1:{peer}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync",  # a test store need not survive a crash
                "--auto-compaction-retention=1",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{self._etcd_url}/health", timeout=2) as resp:  # noqa: S310
                return bool(resp.status == 200)

        self._wait(healthy, "etcd", "etcd /health")

    def _start_apiserver(self) -> None:
        sa_key = str(self._path("sa.key"))
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self._etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={self._path('admin.crt')}",
                f"--tls-private-key-file={self._path('admin.key')}",
                f"--client-ca-file={self._path('ca.crt')}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self._path('sa.pub')}",
                f"--service-account-signing-key-file={sa_key}",
                "--authorization-mode=Node,RBAC",
                # on top of the defaults (PodSecurity, ServiceAccount, ...): lets a namespace keep
                # its pods unscheduled (the contract suite's kubelet-manual-* namespaces)
                "--enable-admission-plugins=PodNodeSelector",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=0",
                "--max-mutating-requests-inflight=0",
                "--profiling=false",
                "--logging-format=text",
                "-v=1",
            ],
        )
        self._wait(lambda: self.request("GET", "/readyz") is not None, "kube-apiserver", "kube-apiserver /readyz")

    def _start_controllers(self) -> None:
        common = [
            f"--kubeconfig={self.kubeconfig_path}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
        ]
        self._spawn(
            "kube-controller-manager",
            [
                *common,
                f"--secure-port={_free_port()}",
                f"--root-ca-file={self._path('ca.crt')}",
                f"--service-account-private-key-file={self._path('sa.key')}",
                "--use-service-account-credentials=false",
                "--node-monitor-grace-period=60s",
            ],
        )
        self._spawn("kube-scheduler", [*common, f"--secure-port={_free_port()}"])
        self._spawn(
            "kwok",
            [
                f"--kubeconfig={self.kubeconfig_path}",
                f"--config={self._path('kwok.yaml')}",
                "--manage-all-nodes=true",
                "--node-ip=127.0.0.1",
                "--node-name=localhost",
                f"--node-port={self.kwok_port}",
                f"--server-address=127.0.0.1:{self.kwok_port}",
                f"--tls-cert-file={self._path('admin.crt')}",
                f"--tls-private-key-file={self._path('admin.key')}",
                "--node-lease-duration-seconds=40",
                "--enable-crds=Logs,ClusterLogs,Exec,ClusterExec",
            ],
        )

    def _install_crds(self, files: Sequence[Path]) -> None:
        names = []
        for f in files:
            for doc in yaml.safe_load_all(f.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    # create, not apply: the big CRDs exceed the last-applied annotation limit
                    self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
                    names.append(doc["metadata"]["name"])
        for name in names:
            self._wait(lambda n=name: self._crd_established(n), "kube-apiserver", f"CRD {name} Established")

    def _crd_established(self, name: str) -> bool:
        crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conds = crd.get("status", {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conds)

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
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": "localhost"},
                ]
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
        plural = (  # enough for the kinds tests apply (Logs, Sandbox, NetworkPolicy, Role, ...)
            kind
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
