"""A real node for tests: the control plane plus containerd, kubelet, runc, gVisor, the CNI bridge,
kube-proxy, CoreDNS and kube-router's NetworkPolicy firewall, all in a network and mount namespace
of their own.

Why: kwok never runs a pod, so Pod Security, a read-only root, dropped capabilities, RuntimeClass
``gvisor`` and NetworkPolicy were claims until a real kubelet ran them. Here they run.

What it guarantees: every component of the cluster (etcd and the API server included) lives in one
network namespace and one mount namespace made by ``unshare`` (:mod:`._node_holder`), so every
pod address, iptables rule, bridge and mount exists only there; the host reaches the API server
through one socket on its loopback, at the same port as inside. Every process joins one cgroup
(:mod:`._node_cgroups`), which :meth:`RealNodeEnv.stop` kills and removes, with the pods, shims and
gVisor sandboxes in it. Kubelet's kernel checks read values bound over ``/proc/sys`` inside the
mount namespace: the host's sysctls, iptables and mounts never change.

With ``csi=True`` the node also has CSI storage that snapshots and clones (:mod:`._node_csi`):
ironflow's own hostpath driver as a node component, the upstream provisioner, snapshotter and
snapshot-controller, StorageClass and VolumeSnapshotClass ``ironflow-csi-hostpath``.

``python -m ironflow.testing.realnode up|down|status`` (``scripts/kube-testenv up --node``) runs
one from a shell (with CSI storage when its binaries are built). Needs root, ``unshare``/``nsenter``,
iptables, ipset, runc and the CNI plugins (``bash scripts/install --test``), and the binaries of
``scripts/kube-testenv build --node``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from ironflow.testing import _node_config as config
from ironflow.testing import _node_csi as csi_parts
from ironflow.testing import images as built
from ironflow.testing import processes
from ironflow.testing._kubeenv_argv import (
    agent_sandbox_args,
    apiserver_args,
    controller_manager_args,
    etcd_args,
    scheduler_args,
)
from ironflow.testing._kubeenv_bins import KubeEnvNotAvailable, find_csi_bin_dir, find_node_bin_dir
from ironflow.testing._kubeenv_procs import KubeEnvError
from ironflow.testing._node_cgroups import NodeCgroup, sweep
from ironflow.testing._node_images import scratch_archive
from ironflow.testing.kubeenv import KubeEnv
from ironflow.testing.ports import free_port

__all__ = ["NODE_NAME", "RealNodeEnv", "missing_tools"]

NODE_NAME: Final = config.NODE_NAME
_TOOLS: Final = ("unshare", "nsenter", "ip", "iptables", "ipset", "mount", "runc")
_READY_TIMEOUT_S: Final = 180.0


def missing_tools() -> list[str]:
    """What the node needs from the machine and does not find (empty when it can run here)."""
    missing = [t for t in _TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    if not Path(config.CNI_BIN_DIR, "bridge").exists():
        missing.append(f"{config.CNI_BIN_DIR}/bridge (containernetworking-plugins)")
    if os.geteuid() != 0:
        missing.append("root")
    return missing


class RealNodeEnv(KubeEnv):
    """One control plane and one real node. ``with RealNodeEnv(images=[…]) as env:``.

    ``images`` are docker archives (``scripts/images path NAME``) loaded into the node's containerd
    before any pod runs; pods name them with ``imagePullPolicy: Never`` (no registry exists here).
    ``csi``: CSI storage too (``scripts/kube-testenv build --csi``), StorageClass
    :data:`~._node_config.CSI_STORAGE_CLASS` and VolumeSnapshotClass :data:`~._node_config.CSI_SNAPSHOT_CLASS`.
    """

    SERVING_IPS = (config.NODE_IP, config.KUBERNETES_SERVICE_IP)

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        node_bin_dir: Path | None = None,
        agent_sandbox: bool = False,
        images: Sequence[Path] = (),
        csi: bool = False,
        csi_bin_dir: Path | None = None,
    ) -> None:
        super().__init__(bin_dir=bin_dir, agent_sandbox=agent_sandbox)
        self.node_bin_dir = node_bin_dir or find_node_bin_dir()
        self.csi = csi
        self.csi_bin_dir = (csi_bin_dir or find_csi_bin_dir()) if csi else None
        self.images = list(images)
        self.cgroup = NodeCgroup()
        self.holder_pid = 0
        self._node_ready = False

    def __repr__(self) -> str:
        return f"RealNodeEnv(api={self.server}, running={len(self._procs)}, cgroup={self.cgroup.path})"

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        missing = missing_tools()
        if missing:
            raise KubeEnvNotAvailable(f"the real node needs: {', '.join(missing)}")
        self.workdir = Path(tempfile.mkdtemp(prefix="ironflow-realnode-"))
        atexit.register(self.stop)
        try:
            sweep()
            self.cgroup.create()
            self._start_holder()
            self._write_node_files()
            self._start_apiserver(self._start_etcd())
            self._spawn("kube-controller-manager", controller_manager_args(self._layout, port=free_port()))
            self._spawn("kube-scheduler", scheduler_args(self._layout, port=free_port()))
            self._start_containerd()
            self._start_kubelet()
            if self.csi:
                self._start_csi()
            self._spawn_node("kube-proxy", [f"--config={self._node_layout.path('kube-proxy.yaml')}", "--v=1"])
            self._spawn_node("kube-router", config.kube_router_args(kubeconfig=self.kubeconfig_path))
            self.apply_objects([config.runtime_class()])
            self._procs.wait(
                lambda: self._exists("/api/v1/namespaces/default/serviceaccounts/default"), "kcm", "default SA"
            )
            self.apply_objects(config.coredns_objects())
            self._procs.wait(self._dns_ready, "kubelet", "CoreDNS Ready", timeout=_READY_TIMEOUT_S)
            if self.csi:  # waited for last: the registration overlaps CoreDNS's start
                self._procs.wait(self._csi_registered, csi_parts.DRIVER_BINARY, "kubelet to register the CSI driver")
            if self.agent_sandbox:
                self.install_crds(sorted((self.share_dir / "agent-sandbox" / "crds").glob("*.yaml")))
                self._spawn("agent-sandbox-controller", agent_sandbox_args(self._layout))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component, kill what is left in the node's cgroup (pods, shims, sandboxes),
        remove the cgroup and the work dir. The namespaces go with their last process."""
        self._procs.stop()
        with contextlib.suppress(OSError, RuntimeError):
            self.cgroup.kill()
        self.cgroup.remove()
        atexit.unregister(self.stop)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        self.holder_pid = 0

    # --- what tests use -----------------------------------------------------------------

    def nsenter(self) -> list[str]:
        """The argv prefix that runs a command inside the node's network and mount namespaces."""
        return ["nsenter", f"--target={self.holder_pid}", "--net", "--mount", "--"]

    def run_in_node(self, argv: Sequence[str], *, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the node's namespaces (``ctr``, ``iptables -S``, ``curl`` to a pod IP)."""
        env = {**os.environ, "PATH": f"{self.node_bin_dir}:{os.environ.get('PATH', '')}"}
        return subprocess.run(
            [*self.nsenter(), *argv], capture_output=True, text=True, timeout=timeout, env=env, check=False
        )

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``ctr -n k8s.io`` against the node's containerd."""
        return self.run_in_node(
            [str(self.node_bin_dir / "ctr"), f"--address={self._node_layout.containerd_socket}", "-n", "k8s.io", *args],
            timeout=300,
        )

    def load_image(self, archive: Path) -> None:
        """Import a docker archive into the node's containerd (``ctr images import``)."""
        done = self.ctr("images", "import", "--no-unpack=false", str(archive))
        if done.returncode != 0:
            raise KubeEnvError(f"ctr images import {archive.name} failed: {done.stderr.strip()[-2000:]}")

    @property
    def csi_state_dir(self) -> Path:
        """Where the CSI driver keeps volumes (``volumes/<volumeHandle>``) and snapshots
        (``snapshots/<snapshotHandle>``), each a directory beside its ``.json`` record."""
        return csi_parts.state_dir(self._node_layout)

    def component_log(self, name: str) -> str:
        assert self.workdir is not None
        return (self.workdir / "logs" / f"{name}.log").read_text(errors="replace")

    # --- internals ----------------------------------------------------------------------

    @property
    def _node_layout(self) -> config.NodeLayout:
        assert self.workdir is not None
        return config.NodeLayout(root=self.workdir, cgroup=self.cgroup.path, bin_dir=self.node_bin_dir)

    def _choose_ports(self) -> None:
        """The API port is the one :meth:`_start_holder` bound on the host's loopback (the same
        inside); the node has no kwok."""

    def _start_holder(self) -> None:
        """Bind the API port on the host's loopback, then start the namespaces' holder with it."""
        assert self.workdir is not None
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        self.api_port = int(listener.getsockname()[1])
        self._write_files()
        (self.workdir / "node").mkdir(exist_ok=True)
        try:
            fd = listener.fileno()
            args = ["-m", "ironflow.testing._node_holder", f"--root={self.workdir}", f"--listen-fd={fd}"]
            self._procs.spawn(
                "holder",
                [*args, f"--port={self.api_port}"],
                cwd=self.workdir,
                log_dir=self._path("logs"),
                exe=sys.executable,
                prefix=["unshare", "--net", "--mount", "--propagation", "private", "--"],
                setup=self.cgroup.joiner(),
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                pass_fds=[fd],
            )
        finally:
            listener.close()
        ready = self.workdir / "node" / "holder.ready"
        self._procs.wait(ready.exists, "holder", "the node's namespaces")
        self.holder_pid = int(ready.read_text())

    def _spawn(self, name: str, args: list[str], *, exe: Path | None = None) -> None:
        """A control-plane component (from the control plane's bin dir unless ``exe``), inside the
        node's namespaces and cgroup."""
        assert self.workdir is not None
        self._procs.spawn(
            name,
            args,
            cwd=self.workdir,
            log_dir=self._path("logs"),
            exe=None if exe is None else str(exe),
            prefix=self.nsenter(),
            setup=self.cgroup.joiner(),
        )

    def _spawn_node(self, name: str, args: list[str], *, exe: Path | None = None) -> None:
        """A node component, from the node's bin dir (unless ``exe``), with it (and runc) on PATH for the shims."""
        assert self.workdir is not None
        path = f"{self.node_bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        self._procs.spawn(
            name,
            args,
            cwd=self.workdir,
            log_dir=self._path("logs"),
            exe=str(exe or self.node_bin_dir / name),
            prefix=self.nsenter(),
            setup=self.cgroup.joiner(),
            env={"PATH": path, "HOME": str(self.workdir), "XDG_RUNTIME_DIR": str(self._node_layout.path("xdg"))},
        )

    def _start_etcd(self) -> str:
        client, peer = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client}"
        self._spawn("etcd", etcd_args(self._layout, client_url=etcd_url, peer_port=peer))
        return etcd_url  # healthy once the API server is (checked through it: etcd is not on the host)

    def _start_apiserver(self, etcd_url: str) -> None:
        args = apiserver_args(self._layout, etcd_url=etcd_url, port=self.api_port, node_ip=config.NODE_IP)
        self._spawn("kube-apiserver", args)
        self._procs.wait(lambda: self.request("GET", "/readyz") is not None, "kube-apiserver", "kube-apiserver /readyz")

    def _write_node_files(self) -> None:
        layout = self._node_layout
        for d in ("containerd", "cni", "cni-ipam", "kubelet", "pod-logs", "runsc", "runsc-logs", "images", "xdg"):
            layout.path(d).mkdir(parents=True, exist_ok=True)
        layout.path("containerd.toml").write_text(config.containerd_toml(layout))
        layout.path("runsc.toml").write_text(config.runsc_toml(layout))
        layout.path("cni/10-ironflow.conflist").write_text(config.cni_conflist(layout))
        layout.path("kubelet.yaml").write_text(yaml.safe_dump(config.kubelet_config(layout)))
        layout.path("kube-proxy.yaml").write_text(
            yaml.safe_dump(config.kube_proxy_config(kubeconfig=self.kubeconfig_path))
        )
        layout.path("resolv.conf").write_text("nameserver 127.0.0.1\n")  # no upstream: the node has no way out
        bins = self.node_bin_dir
        scratch_archive(layout.path("images/pause.tar"), config.PAUSE_IMAGE, bins / "pause", entrypoint=["/pause"])
        scratch_archive(
            layout.path("images/coredns.tar"), config.COREDNS_IMAGE, bins / "coredns", entrypoint=["/coredns"]
        )

    def _start_containerd(self) -> None:
        layout = self._node_layout
        self._spawn_node("containerd", [f"--config={layout.path('containerd.toml')}", "--log-level=warn"])
        self._procs.wait(lambda: self.ctr("version").returncode == 0, "containerd", "containerd's socket")
        for archive in [layout.path("images/pause.tar"), layout.path("images/coredns.tar"), *self.images]:
            self.load_image(archive)

    def _start_kubelet(self) -> None:
        layout = self._node_layout
        self._spawn_node("kubelet", config.kubelet_args(layout, kubeconfig=self.kubeconfig_path))
        self._procs.wait(self._node_is_ready, "kubelet", "the node Ready", timeout=_READY_TIMEOUT_S)

    def _start_csi(self) -> None:
        """The driver as a node component (root, in kubelet's mount namespace, where its bind mounts
        must be), the snapshot CRDs and storage objects, then the sidecars (the provisioner watches
        VolumeSnapshots: their CRDs come first). Registration is waited for at the end of start."""
        assert self.csi_bin_dir is not None
        layout = self._node_layout
        driver = csi_parts.DRIVER_BINARY
        self._spawn_node(driver, csi_parts.driver_args(layout), exe=self.csi_bin_dir / driver)
        self.install_crds(sorted((self.csi_bin_dir.parent / "share" / "snapshot-crds").glob("*.yaml")))
        self.apply_objects(csi_parts.storage_objects())
        for name in csi_parts.SIDECARS:
            args = csi_parts.sidecar_args(name, layout, kubeconfig=self.kubeconfig_path)
            self._spawn(name, args, exe=self.csi_bin_dir / name)

    def _csi_registered(self) -> bool:
        return csi_parts.registered(self.request("GET", f"/apis/storage.k8s.io/v1/csinodes/{NODE_NAME}"))

    def _node_is_ready(self) -> bool:
        node = self.request("GET", f"/api/v1/nodes/{NODE_NAME}")
        return any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", [])
        )

    def _dns_ready(self) -> bool:
        dep = self.request("GET", "/apis/apps/v1/namespaces/kube-system/deployments/coredns")
        return bool(dep.get("status", {}).get("readyReplicas"))

    # --- pods (a small sync face for the harness's own checks) --------------------------

    def wait_pod(
        self, namespace: str, name: str, done: Callable[[dict[str, Any]], bool], *, timeout: float = 120
    ) -> dict[str, Any]:
        """Poll a pod until ``done(pod)``; fail with its status and the kubelet's log tail."""
        deadline = time.monotonic() + timeout
        pod: dict[str, Any] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(KubeEnvError):
                pod = self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
                if done(pod):
                    return pod
            time.sleep(0.2)
        raise KubeEnvError(f"pod {namespace}/{name} not done in {timeout:.0f}s: {json.dumps(pod.get('status'))[:2000]}")


# --- a shell's face: up, down, status ---------------------------------------------------------


def _state_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return Path(base) / "ironflow-kube-testenv-node"


def _built_images() -> list[Path]:
    repo = Path(__file__).resolve().parents[3]
    out = []
    for name in ("runner", "auth-proxy", "worker"):
        with contextlib.suppress(Exception):
            path = built.archive_path(repo, name)
            if path.exists():
                out.append(path)
    return out


def _serve(state: Path) -> int:
    """Run one node until SIGTERM/SIGINT (the process ``up`` leaves behind)."""
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        find_csi_bin_dir()
        csi = True
    except KubeEnvNotAvailable:
        csi = False
    env = RealNodeEnv(images=_built_images(), csi=csi)
    try:
        env.start()
        kubeconfig = state / "kubeconfig"
        kubeconfig.write_text(env.kubeconfig_path.read_text())
        (state / "ready").write_text(f"{env.server}\n")
        print(f"up: {env.server} workdir={env.workdir} cgroup={env.cgroup.path}", flush=True)
        while not stop:
            time.sleep(0.5)
    finally:
        started = time.monotonic()
        env.stop()
        print(f"stopped in {time.monotonic() - started:.1f}s", flush=True)
        for name in ("ready", "kubeconfig", "pid"):
            with contextlib.suppress(FileNotFoundError):
                (state / name).unlink()
    return 0


def _up(state: Path) -> int:
    pid_file = state / "pid"
    if pid_file.exists() and processes.running(int(pid_file.read_text())):
        print(f"export KUBECONFIG={state / 'kubeconfig'}  # already up (pid {pid_file.read_text().strip()})")
        return 0
    state.mkdir(parents=True, exist_ok=True)
    log = state / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ironflow.testing.realnode", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    pid_file.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + _READY_TIMEOUT_S + 120
    while not (state / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            print(f"kube-testenv: the node did not come up:\n{tail}", file=sys.stderr)
            if proc.poll() is None:
                proc.terminate()
            return 1
        time.sleep(0.3)
    print(f"export KUBECONFIG={state / 'kubeconfig'}")
    return 0


def _down(state: Path) -> int:
    pid_file = state / "pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while processes.running(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()
    swept = sweep()
    print(f"kube-testenv: down{' (swept ' + ', '.join(swept) + ')' if swept else ''}")
    return 0


def _status(state: Path) -> int:
    ready = (state / "ready").exists()
    print(f"kube-testenv: {'up, export KUBECONFIG=' + str(state / 'kubeconfig') if ready else 'down'}")
    return 0 if ready else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else ""
    flags = [a for a in args[1:] if a != "--node"]
    if flags or command not in ("up", "down", "status", "serve"):
        print("usage: kube-testenv up --node | down | status", file=sys.stderr)
        return 2
    state = _state_dir()
    try:
        if command == "serve":
            return _serve(state)
        return {"up": _up, "down": _down, "status": _status}[command](state)
    except KubeEnvNotAvailable as exc:
        print(f"kube-testenv: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
