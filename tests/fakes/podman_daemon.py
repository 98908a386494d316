"""Podman's Docker API for the ``--isolation docker`` tests (a plugin of tests/conftest.py).

``podman_daemon`` (session) starts Debian's ``podman system service`` rootful, as
:mod:`tests.fakes.docker_daemon` starts dockerd: in a network and mount namespace of its own
(``unshare --net --mount``, a tmpfs over ``/run``, its storage on a tmpfs mounted inside, its
socket and temp dir in a temp dir), and in a cgroup namespace rooted at the cgroup
``/ironflow-podman-<pid>``: Podman's cgroupfs manager puts its containers under ``/libpod_parent``,
which is then that cgroup's child, so everything it starts is killed and removed with it. The
cgroup hierarchies are mounted again inside (cgroup v1: each one on a tmpfs over
``/sys/fs/cgroup``; v2: the one). The runner image built from this tree is loaded with
``docker load`` (no registry is asked); the host's ``docker`` client talks to it.

A test marked ``podman`` (the ``podman`` case of :data:`tests.fakes.local_sandbox.ALL_ISOLATIONS`:
isolation ``docker``, the daemon Podman) gets ``DOCKER_HOST`` pointed at it; skipped with the fix
when ``podman`` or the image is missing (failed instead under ``IRONFLOW_REQUIRE_PODMAN=1``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from tests.fakes.docker_daemon import DockerDaemon, answering, holding_the_runner

from ironflow.testing import _node_cgroups

__all__ = ["podman_daemon", "start_podman"]

_PREFIX: Final = "ironflow-podman-"
_TOOLS: Final = ("podman", "unshare", "docker")
_CATATONIT: Final = "/usr/libexec/podman/catatonit"  # the container's init (--init)
_REQUIRED: Final = "IRONFLOW_REQUIRE_PODMAN"
_OPTIONS_KEPT: Final = frozenset({"rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "nsdelegate"})


def missing() -> list[str]:
    """What the daemon needs from the machine and does not find."""
    out = [t for t in _TOOLS if shutil.which(t) is None]
    if not os.path.exists(_CATATONIT):
        out.append("catatonit")
    if os.geteuid() != 0:
        out.append("root")
    return out


def _cgroup_mounts() -> str:
    """Shell lines that mount the cgroup hierarchies again, inside the new cgroup namespace."""
    mounts = [line.split()[1:4] for line in Path("/proc/self/mounts").read_text().splitlines()]
    if any(point == "/sys/fs/cgroup" and fstype == "cgroup2" for point, fstype, _ in mounts):
        return "mount -t cgroup2 cgroup2 /sys/fs/cgroup"
    lines = ["mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup"]
    for point, fstype, options in mounts:
        if fstype != "cgroup" or not point.startswith("/sys/fs/cgroup/"):
            continue
        own = [o for o in options.split(",") if o not in _OPTIONS_KEPT]
        if any(o.startswith("name=") for o in own):
            own = ["none", *own]
        lines.append(f"mkdir {shlex.quote(point)} && mount -t cgroup -o {','.join(own)} cgroup {shlex.quote(point)}")
    return " && ".join(lines)


def _podman_argv(root: Path) -> list[str]:
    data = f"{root}/data"
    script = (
        f"mount -t tmpfs -o mode=755,size=64m tmpfs /run && mkdir {shlex.quote(data)} && "
        f"mount -t tmpfs -o mode=711 tmpfs {shlex.quote(data)} && mkdir {shlex.quote(data)}/tmp && "
        f'{_cgroup_mounts()} && exec "$@"'
    )
    return [
        "unshare", "--net", "--mount", "--cgroup", "--propagation", "private", "--",
        "sh", "-c", script, "podman",
        shutil.which("podman") or "podman",
        f"--root={data}/storage", f"--runroot={data}/run", f"--tmpdir={data}/tmp",
        "--storage-driver=overlay", "--cgroup-manager=cgroupfs", "--events-backend=file",
        "--log-level=warn",
        "system", "service", "--time=0", f"unix://{root}/podman.sock",
    ]  # fmt: skip


def start_podman() -> DockerDaemon:
    """Start the service and wait until it answers.

    Raises:
        RuntimeError: it did not answer in time (its log's end in the message).
    """
    _node_cgroups.sweep(_PREFIX)  # the cgroups of a session that was killed
    root = Path(tempfile.mkdtemp(prefix="ifp-", dir="/tmp"))  # short: the sockets' paths have a limit
    (root / "containers.conf").write_text("")  # never the host's
    cgroup = _node_cgroups.NodeCgroup(prefix=_PREFIX)
    cgroup.create()
    # TMPDIR: where a loaded image is copied first (the tmpfs mounted inside, not the host's /var/tmp).
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "CONTAINERS_CONF": str(root / "containers.conf"),
        "TMPDIR": f"{root}/data/tmp",
    }
    return answering(_podman_argv(root), root, cgroup, name="podman", socket="podman.sock", env=env)


@pytest.fixture(scope="session")
def podman_daemon() -> Iterator[DockerDaemon]:
    """One Podman service for the session, holding the runner image built from this tree."""
    yield from holding_the_runner(start_podman, missing(), what="Podman", required_by=_REQUIRED)
