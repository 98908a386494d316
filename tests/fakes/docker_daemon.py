"""A real Docker daemon for the ``--isolation docker`` tests (a plugin of tests/conftest.py).

``docker_daemon`` (session) starts Debian's ``dockerd`` inside a network and mount namespace of
its own (``unshare --net --mount``, mounts private, a tmpfs over ``/run``): it never sees the
host's network, so it cannot touch the host's iptables or links (``--iptables=false
--bridge=none`` besides), and its overlay mounts never reach the host. Its data and exec roots
are in a temp dir (its images and containers on a tmpfs mounted inside); it and everything it
starts (its containerd, shims, containers: ``--cgroup-parent``) live in the cgroup
``/ironflow-dockerd-<pid>`` (:class:`~ironflow.testing._node_cgroups.NodeCgroup`), killed and
removed at the end, so no process, mount or cgroup is left. Its socket is in the temp dir, where
the host's client reaches it (``DOCKER_HOST``). The runner image built from this tree (``scripts/images
build runner``) is loaded with ``docker load``: no registry is ever asked.

A test marked ``docker`` (the ``docker`` case of :data:`tests.fakes.local_sandbox.ALL_ISOLATIONS`)
gets ``DOCKER_HOST`` pointed at it; it is skipped with the fix when ``dockerd`` or the image is
missing (failed instead under ``IRONFLOW_REQUIRE_DOCKER=1``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from tests.fakes import real_node

from ironflow.cluster import image_builds
from ironflow.testing import _node_cgroups, images

__all__ = [
    "DOCKER_TIMEOUT_S",
    "ROOT",
    "DockerDaemon",
    "answering",
    "docker_daemon",
    "holding_the_runner",
    "start_daemon",
    "stop_daemon",
]

ROOT = Path(__file__).resolve().parents[2]
#: A docker test's limit: the first one also starts the daemon and loads the runner image.
DOCKER_TIMEOUT_S: Final = 300
_PREFIX: Final = "ironflow-dockerd-"
_TOOLS: Final = ("dockerd", "containerd", "runc", "unshare", "docker")
_READY_S: Final = 60.0
_STOP_S: Final = 20.0
#: Set to 1 where the tier must run (CI installed docker.io and built the runner image): a missing part fails.
_REQUIRED: Final = "IRONFLOW_REQUIRE_DOCKER"


@dataclass
class DockerDaemon:
    """One running daemon: its socket (``host``), its temp dir, its process and cgroup."""

    host: str
    root: Path
    proc: subprocess.Popen[bytes]
    cgroup: _node_cgroups.NodeCgroup
    #: The runner image as the daemon names it (``docker load``'s tag).
    runner_image: str = ""
    #: The daemon's log file in :attr:`root`.
    log_name: str = "dockerd.log"

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host}

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The host's ``docker`` client against this daemon."""
        return subprocess.run(
            ["docker", *args], env=self.env(), capture_output=True, text=True, timeout=timeout, check=False
        )

    def log(self) -> str:
        return (self.root / self.log_name).read_text(errors="replace")[-4000:]


def missing() -> list[str]:
    """What the daemon needs from the machine and does not find."""
    out = [t for t in _TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    if os.geteuid() != 0:
        out.append("root")
    return out


def _dockerd_argv(root: Path, cgroup: str) -> list[str]:
    data = shlex.quote(f"{root}/data")
    return [
        "unshare", "--net", "--mount", "--propagation", "private", "--",
        # Inside only: a tmpfs over /run (whatever the daemon writes there by default is gone with it) and
        # one for its images and containers (gone with the namespace: nothing to delete, faster to load).
        "sh", "-c", f'mount -t tmpfs -o mode=755,size=64m tmpfs /run && mkdir {data} && '
        f'mount -t tmpfs -o mode=711 tmpfs {data} && exec "$@"', "dockerd",
        shutil.which("dockerd") or "/usr/sbin/dockerd",
        f"--host=unix://{root}/docker.sock",
        f"--data-root={root}/data",
        f"--exec-root={root}/exec",
        f"--pidfile={root}/dockerd.pid",
        f"--config-file={root}/daemon.json",
        "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false",
        "--bridge=none", "--userland-proxy=false",
        "--storage-driver=overlay2",
        "--exec-opt=native.cgroupdriver=cgroupfs",
        f"--cgroup-parent={cgroup}",
        "--log-level=warn",
    ]  # fmt: skip


def start_daemon() -> DockerDaemon:
    """Start a daemon and wait until it answers.

    Raises:
        RuntimeError: it did not answer in time (its log's end in the message).
    """
    _node_cgroups.sweep(_PREFIX)  # the cgroups of a session that was killed
    root = Path(tempfile.mkdtemp(prefix="ifd-", dir="/tmp"))  # short: the sockets' paths have a limit
    (root / "daemon.json").write_text("{}\n")  # never the host's /etc/docker/daemon.json
    cgroup = _node_cgroups.NodeCgroup(prefix=_PREFIX)
    cgroup.create()
    return answering(_dockerd_argv(root, cgroup.path), root, cgroup, name="dockerd", socket="docker.sock")


def answering(
    argv: list[str],
    root: Path,
    cgroup: _node_cgroups.NodeCgroup,
    *,
    name: str,
    socket: str,
    env: dict[str, str] | None = None,
) -> DockerDaemon:
    """``argv`` started in ``cgroup`` (its own session, its log ``<root>/<name>.log``), once its socket
    ``<root>/<socket>`` answers; stopped and raising when it did not in time."""
    with (root / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=cgroup.joiner(),
            env=env,
            cwd=root,  # what it writes where it stands (Podman's conmon: an `oom` file) stays in its temp dir
        )
    daemon = DockerDaemon(f"unix://{root}/{socket}", root, proc, cgroup, log_name=f"{name}.log")
    deadline = time.monotonic() + _READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            if daemon.docker("version", "--format", "{{.Server.Version}}", timeout=10).returncode == 0:
                return daemon
        time.sleep(0.2)
    why = daemon.log()
    stop_daemon(daemon)
    raise RuntimeError(f"{name} did not answer in {_READY_S:g}s: {why}")


def stop_daemon(daemon: DockerDaemon) -> None:
    """Stop the daemon by its pid, kill what is left in its cgroup, remove the cgroup and the temp dir."""
    if daemon.proc.poll() is None:
        daemon.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.proc.wait(_STOP_S)
    with contextlib.suppress(OSError, RuntimeError):
        daemon.cgroup.kill()
    if daemon.proc.poll() is None:
        daemon.proc.kill()
    daemon.proc.wait()
    daemon.cgroup.remove()
    shutil.rmtree(daemon.root, ignore_errors=True)  # its mounts went with its namespace


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Docker tests get :data:`DOCKER_TIMEOUT_S` unless they set their own: the first one pays for the
    daemon's start and the image's load."""
    for item in items:
        if item.get_closest_marker("docker") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DOCKER_TIMEOUT_S))


def holding_the_runner(
    start: Callable[[], DockerDaemon], lacking: list[str], *, what: str, required_by: str
) -> Iterator[DockerDaemon]:
    """A daemon from ``start`` holding the runner image built from this tree, stopped at the end;
    skipped (failed under ``required_by=1``) when ``lacking`` names something or the image is not built."""
    if lacking:
        real_node.skip_or_fail(f"the {what} tests need {', '.join(lacking)}: bash scripts/install --test", required_by)
    archive = images.archive_path(ROOT, "runner")
    if not archive.exists():
        real_node.skip_or_fail("the runner image is not built: bash scripts/images build runner", required_by)
    daemon = start()
    try:
        loaded = daemon.docker("load", "--quiet", "--input", str(archive), timeout=600)
        if loaded.returncode != 0:
            raise RuntimeError(f"docker load into {what} failed: {loaded.stderr.strip()[-2000:]}")
        daemon.runner_image = image_builds.IMAGES["runner"].reference
        yield daemon
    finally:
        stop_daemon(daemon)


@pytest.fixture(scope="session")
def docker_daemon() -> Iterator[DockerDaemon]:
    """One daemon for the session, holding the runner image built from this tree."""
    yield from holding_the_runner(start_daemon, missing(), what="Docker", required_by=_REQUIRED)


@pytest.fixture(autouse=True)
def _docker_host(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test marked ``docker`` reaches the session's daemon through ``DOCKER_HOST``, as a user's would
    (Podman's when it is marked ``podman`` too, :mod:`tests.fakes.podman_daemon`), and must leave no
    container behind."""
    if request.node.get_closest_marker("docker") is None:
        yield
        return
    podman = request.node.get_closest_marker("podman") is not None
    daemon: DockerDaemon = request.getfixturevalue("podman_daemon" if podman else "docker_daemon")
    monkeypatch.setenv("DOCKER_HOST", daemon.host)
    yield
    left = daemon.docker("ps", "--all", "--quiet").stdout.split()
    assert left == [], f"the test left containers on the daemon: {left}"
