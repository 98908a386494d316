"""``scripts/kube-testenv build``: it says what it builds as it goes, and a second build waits on the
first's lock instead of building the same binaries beside it.

The Go toolchain is a stand-in here (a script that writes the ``-o`` file and prints a module cache
with the data files the build copies): a real cold build takes 10+ minutes; the real one runs in CI
through ``.ci/run`` and every real-API test uses what it built.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "kube-testenv"

_FAKE_GO = """#!/bin/sh
# go build ... -o OUT PKG | go install PKG@V (into $GOBIN) | go env GOMODCACHE | go mod download ...
echo "$*" >> "$FAKE_GO_LOG"
case "$1" in
  env) echo "$FAKE_MODCACHE" ;;
  build) while [ $# -gt 0 ]; do [ "$1" = -o ] && { printf '#!/bin/sh\\n' > "$2"; chmod +x "$2"; }; shift; done ;;
  install) printf '#!/bin/sh\\n' > "$GOBIN/kwok"; chmod +x "$GOBIN/kwok" ;;
esac
"""


SNAPSHOT_CRDS = (
    "snapshot.storage.k8s.io_volumesnapshotclasses.yaml",
    "snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
    "snapshot.storage.k8s.io_volumesnapshots.yaml",
)


def _versions() -> dict[str, str]:
    out = subprocess.run(["bash", str(SCRIPT), "versions"], capture_output=True, text=True, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def _module_cache(root: Path) -> Path:
    v = _versions()
    kwok = root / f"sigs.k8s.io/kwok@{v['kwok']}/kustomize"
    for rel in (
        "stage/node/fast/node-initialize.yaml",
        "stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        "stage/pod/fast/pod-ready.yaml",
        "stage/pod/fast/pod-complete.yaml",
        "stage/pod/fast/pod-delete.yaml",
        "crd/bases/kwok.x-k8s.io_stages.yaml",
    ):
        (kwok / rel).parent.mkdir(parents=True, exist_ok=True)
        (kwok / rel).write_text("kind: Stage\n")
    crds = root / f"sigs.k8s.io/agent-sandbox@{v['agent-sandbox']}/k8s/crds"
    crds.mkdir(parents=True)
    (crds / "agents.x-k8s.io_sandboxes.yaml").write_text("kind: CustomResourceDefinition\n")
    kro = root / f"github.com/kubernetes-sigs/kro@{v['kro']}"
    (kro / "helm/crds").mkdir(parents=True)
    (kro / "helm/crds/kro.run_resourcegraphdefinitions.yaml").write_text("kind: CustomResourceDefinition\n")
    (kro / "LICENSE").write_text("Apache License\n")
    client = root / f"github.com/kubernetes-csi/external-snapshotter/client/v8@{v['external-snapshotter']}"
    (client / "config/crd").mkdir(parents=True)
    for name in (*SNAPSHOT_CRDS, "groupsnapshot.storage.k8s.io_volumegroupsnapshots.yaml"):
        (client / "config/crd" / name).write_text("kind: CustomResourceDefinition\n")
    (client / "LICENSE").write_text("Apache License\n")
    return root


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text(_FAKE_GO)
    (bin_dir / "go").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "FAKE_GO_LOG": str(tmp_path / "go.log"),
        "FAKE_MODCACHE": str(_module_cache(tmp_path / "modcache")),
    }


def test_build_logs_each_component_as_it_starts_and_ends(env: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(SCRIPT), "build"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    bin_dir = Path(done.stdout.strip())
    names = (
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "etcd",
        "kwok",
        "agent-sandbox-controller",
        "kro-controller",
    )
    assert all((bin_dir / name).is_file() for name in names)
    assert sorted(p.name for p in (bin_dir.parent / "share" / "kro" / "crds").iterdir()) == [
        "LICENSE",
        "kro.run_resourcegraphdefinitions.yaml",
    ]
    lines = done.stderr.splitlines()
    for name in names:
        started = lines.index(f"kube-testenv: building {name}")
        ended = next(i for i, line in enumerate(lines) if line.startswith(f"kube-testenv: built {name} in "))
        assert started < ended
    # Built: a second build builds nothing.
    calls = (tmp_path / "go.log").read_text().count("build ")
    again = subprocess.run(["bash", str(SCRIPT), "build"], env=env, capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout) == (0, done.stdout)
    assert (tmp_path / "go.log").read_text().count("build ") == calls


def test_a_second_build_waits_for_the_first_builds_lock(env: dict[str, str], tmp_path: Path) -> None:
    # A first build makes the versions' cache dir (and its lock file); then the binaries go, as before a build.
    subprocess.run(["bash", str(SCRIPT), "build"], env=env, capture_output=True, text=True, timeout=60, check=True)
    (root,) = (tmp_path / "cache" / "ironflow" / "kube-testenv").iterdir()
    for b in (root / "bin").iterdir():
        b.unlink()
    go_log = tmp_path / "go.log"
    before = go_log.read_text()
    stderr = tmp_path / "second.err"
    with open(root / ".lock", "w") as held, open(stderr, "w") as err:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a first build would hold it
        waiting = subprocess.Popen(["bash", str(SCRIPT), "build"], env=env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 30
        while "waiting for it" not in stderr.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stderr.read_text().startswith(f"kube-testenv: another build holds {root}/.lock: waiting for it")
        time.sleep(0.3)  # it stays waiting (and builds nothing) while the lock is held
        assert waiting.poll() is None
        assert go_log.read_text() == before
    assert waiting.wait(timeout=60) == 0, stderr.read_text()
    assert all((root / "bin" / b).is_file() for b in ("kube-apiserver", "etcd", "kwok"))


def test_the_csi_parts_build_into_their_own_dir_with_the_snapshot_crds(env: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(SCRIPT), "build", "--csi"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    bin_dir = Path(done.stdout.strip())
    v = _versions()
    tag = f"csi_provisioner-{v['external-provisioner'][1:]}_snapshotter-{v['external-snapshotter'][1:]}"
    assert bin_dir.parent.name == tag
    names = ("csi-provisioner", "csi-snapshotter", "snapshot-controller", "hostpath-csi")
    assert sorted(p.name for p in bin_dir.iterdir()) == sorted([*names, "hostpath-csi.sum"])
    assert (bin_dir / "hostpath-csi.sum").read_text() == f"{v['hostpath-csi'].split()[0]}\n"
    # Only the snapshot.storage.k8s.io/v1 CRDs (not the group-snapshot alpha ones), with the licence.
    crds = bin_dir.parent / "share" / "snapshot-crds"
    assert sorted(p.name for p in crds.iterdir()) == sorted(["LICENSE", *SNAPSHOT_CRDS])
    for name in names:
        assert f"kube-testenv: building {name}" in done.stderr.splitlines()
        assert f"kube-testenv: built {name} in " in done.stderr
    go_log = (tmp_path / "go.log").read_text()
    assert f"-X main.version={v['external-snapshotter']}" in go_log
    listed = subprocess.run(["bash", str(SCRIPT), "bin-dir", "--csi"], env=env, capture_output=True, text=True)
    assert (listed.returncode, listed.stdout) == (0, done.stdout)
    # Built: a second build builds nothing.
    again = subprocess.run(["bash", str(SCRIPT), "build", "--csi"], env=env, capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout) == (0, done.stdout)
    assert (tmp_path / "go.log").read_text() == go_log


def test_a_change_to_the_csi_drivers_sources_rebuilds_only_the_driver(env: dict[str, str], tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    for rel in ("kube-testenv", "kube-testenv.d/csi-provisioner/go.mod", "kube-testenv.d/csi-snapshotter/go.mod"):
        (scripts / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SCRIPT.parent / rel, scripts / rel)
    shutil.copytree(SCRIPT.parent / "kube-testenv.d" / "hostpath-csi", scripts / "kube-testenv.d" / "hostpath-csi")
    script = scripts / "kube-testenv"
    first = subprocess.run(["bash", str(script), "build", "--csi"], env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    with (scripts / "kube-testenv.d" / "hostpath-csi" / "main.go").open("a") as f:
        f.write("// changed\n")
    (tmp_path / "go.log").write_text("")
    listed = subprocess.run(["bash", str(script), "bin-dir", "--csi"], env=env, capture_output=True, text=True)
    assert listed.returncode == 1  # stale: not complete until rebuilt
    again = subprocess.run(["bash", str(script), "build", "--csi"], env=env, capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout) == (0, first.stdout), again.stderr
    builds = [line for line in (tmp_path / "go.log").read_text().splitlines() if line.startswith("build")]
    assert len(builds) == 1, builds
    assert "hostpath-csi" in builds[0]


def test_csi_bin_dir_before_a_build_names_the_fix(env: dict[str, str]) -> None:
    done = subprocess.run(["bash", str(SCRIPT), "bin-dir", "--csi"], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "kube-testenv: CSI parts not built yet: run scripts/kube-testenv build --csi\n"
