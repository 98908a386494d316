"""The real KRO controller (kro.run, v0.9.4) beside the real-API tier's cluster, as a fixture.

``scripts/kube-testenv build`` builds ``kro-controller`` from its pinned Go module into the
same bin dir as the control plane and copies KRO's CRDs (ResourceGraphDefinition,
GraphRevision) into ``share/kro/crds``. :func:`kro_env` installs those CRDs on the session's
:class:`~ironflow.testing.kubeenv.KubeEnv` and runs the controller as a subprocess (no leader
election, metrics and health on free loopback ports), once per test session; it skips, with the
fix, when the binary is not built. :func:`apply_rgd` applies a graph and waits until KRO has
accepted it (``Ready``) and serves its instance kind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from ironflow.testing._kubeenv_procs import die_with_parent
from ironflow.testing.kubeenv import KubeEnv, KubeEnvError
from ironflow.testing.polling import eventually_sync
from ironflow.testing.ports import free_port

__all__ = ["KroEnv", "apply_rgd", "kro_env"]

BINARY: Final = "kro-controller"
_CRD_PATH: Final = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass
class KroEnv:
    """The cluster, with KRO's controller running against it."""

    kube: KubeEnv
    log: Path
    process: subprocess.Popen[bytes]

    def log_tail(self, lines: int = 40) -> str:
        """The end of the controller's log, for failure messages."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    conds = obj.get("status", {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conds)


def _established(env: KubeEnv, name: str) -> bool:
    return _condition(env.request("GET", f"{_CRD_PATH}/{name}"), "Established")


def _install_crds(env: KubeEnv, directory: Path) -> None:
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            with contextlib.suppress(KubeEnvError):  # created by an earlier session's start: fine
                env.request("POST", _CRD_PATH, doc)
            name = doc["metadata"]["name"]
            eventually_sync(
                functools.partial(_established, env, name), limit_s=30, what=f"CRD {name} to be Established"
            )


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="session")
def kro_env(kube_env: KubeEnv) -> Iterator[KroEnv]:
    """KRO's CRDs on the session's cluster and its controller running; skipped when not built."""
    binary, crds = kube_env.bin_dir / BINARY, kube_env.share_dir / "kro" / "crds"
    if not os.access(binary, os.X_OK) or not crds.is_dir():
        pytest.skip(f"{BINARY} or its CRDs not found beside {kube_env.bin_dir}: run scripts/kube-testenv build")
    _install_crds(kube_env, crds)
    workdir = Path(tempfile.mkdtemp(prefix="ironflow-kro-"))
    log = workdir / "kro-controller.log"
    health = free_port()
    argv = [
        str(binary),
        f"--kubeconfig={kube_env.kubeconfig_path}",
        "--leader-elect=false",
        f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{health}",
        "--zap-log-level=info",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(  # dies with this run, even a killed one (as the cluster's components do)
            argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent
        )
    env = KroEnv(kube_env, log, process)
    try:
        eventually_sync(
            lambda: process.poll() is not None or _healthy(health),
            limit_s=60,
            what=lambda: f"kro-controller to be ready; log:\n{env.log_tail()}",
        )
        if process.returncode is not None:
            raise RuntimeError(f"kro-controller exited {process.returncode}; log:\n{env.log_tail()}")
        yield env
    finally:
        _stop(process)
        shutil.rmtree(workdir, ignore_errors=True)  # its log went into the failures that needed it


def _served(env: KubeEnv, kind: str) -> bool:
    try:
        listed = env.request("GET", "/apis/kro.run/v1alpha1").get("resources") or []
    except KubeEnvError:  # no kro.run/v1alpha1 kind served yet
        return False
    return any(r.get("kind") == kind for r in listed)


def apply_rgd(env: KroEnv, rgd: Mapping[str, Any], *, limit_s: float = 60) -> dict[str, Any]:
    """Apply a ResourceGraphDefinition; return it once KRO reports it Ready and its instance
    kind is served (KRO creates that CRD)."""
    env.kube.apply_objects([rgd])
    path = f"/apis/kro.run/v1alpha1/resourcegraphdefinitions/{rgd['metadata']['name']}"
    seen: dict[str, Any] = {}

    def ready() -> bool:
        seen.update(env.kube.request("GET", path))
        return _condition(seen, "Ready")

    eventually_sync(
        ready,
        limit_s=limit_s,
        what=lambda: f"RGD {rgd['metadata']['name']} Ready; status {seen.get('status')}; log:\n{env.log_tail()}",
    )
    kind = rgd["spec"]["schema"]["kind"]
    eventually_sync(lambda: _served(env.kube, kind), limit_s=limit_s, what=f"kro.run/v1alpha1 {kind} in discovery")
    return seen
