"""A Docker session's container: the ``docker run`` of the session runtime, its labels, and the sweep's rule (pure).

The container is a Docker step's (:func:`ironflow.local.sandbox.docker.docker_argv`: the runner
image never pulled, a read-only root, uid 10001 with every capability dropped and
``no-new-privileges``, the daemon's seccomp profile, no network, pids, memory and CPU limits) whose
one command is :mod:`ironflow.sandbox_runtime.server`, with the daemon's init as pid 1 (``--init``)
to reap what its commands leave. The host reaches the runtime through a unix socket in a host
directory bind-mounted at :data:`SOCKET_DIR`: uid 10001's until the runtime has bound it (at its
hand-out, before any command runs), root's (0700) from then on, so no command of the session (uid
10001 too) can reach the path or put a socket of its own in its place
(:mod:`~ironflow.local.sessions.docker_sessions` makes the switch). They share the runtime's uid and
pid namespace, so they can signal it (ending their own session). The runtime
(``--commands-share-uid``) is non-dumpable: its commands can read neither its memory nor its fds.
Its token comes after the start, on the attached stdin (the hand-out line), so it is in no argv,
environment, label or ``docker inspect``. No TCP port is published. A session with an egress policy
(or an agent's proxy) gets a Docker step's relay: the proxy sockets bound in and ``forwarder.js``
listening on the container's own loopback before it starts the runtime; still no network.

Each container carries :data:`~ironflow.labels.SANDBOX_SESSION_SELECTOR`'s labels, its session
directory and its owner (the process that started it, as :mod:`ironflow.local.workdirs` marks
a directory): :func:`stale` says which ones a sweep removes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from ironflow import labels
from ironflow.claude import layout
from ironflow.local import workdirs
from ironflow.local.sandbox import argv, bwrap, docker, environment
from ironflow.workspaces import WORKSPACE_PATH

__all__ = [
    "FILTERS",
    "RUNTIME_DIR",
    "SOCKET_DIR",
    "SOCKET_SUBDIR",
    "ListedContainer",
    "host_socket",
    "session_argv",
    "session_labels",
    "stale",
]

#: Where the runtime's files and the socket's directory appear in the container (new top-level
#: paths: the daemon makes their mount points, the image has neither).
RUNTIME_DIR: Final = "/ironflow-runtime"
SOCKET_DIR: Final = "/ironflow-session"
#: The session directory's subdirectories bound there: a copy of the runtime's files, the socket's.
RUNTIME_SUBDIR: Final = "rt"
SOCKET_SUBDIR: Final = "s"
_SOCKET: Final = "rt.sock"
_ENDED: Final = frozenset({"exited", "dead"})
#: ``docker ps --filter`` for every session container of ironflow's.
FILTERS: Final = (
    f"label={labels.LABEL_MANAGED_BY}={labels.MANAGED_BY_VALUE}",
    f"label={labels.LABEL_COMPONENT}={labels.COMPONENT_SANDBOX_SESSION}",
)


@dataclass(frozen=True)
class ListedContainer:
    """A session container as ``docker ps`` lists it."""

    id: str
    state: str
    owner: str


def host_socket(directory: str) -> str:
    """Where the host reaches the runtime of the session in ``directory``."""
    return os.path.join(directory, SOCKET_SUBDIR, _SOCKET)


def session_labels(directory: str, owner: workdirs.Owner | None) -> tuple[tuple[str, str], ...]:
    """The container's labels: ironflow's session selector, its directory and its owner."""
    found = (
        (labels.LABEL_MANAGED_BY, labels.MANAGED_BY_VALUE),
        (labels.LABEL_COMPONENT, labels.COMPONENT_SANDBOX_SESSION),
        (labels.LABEL_SESSION_DIR, directory),
    )
    return found if owner is None else (*found, (labels.LABEL_OWNER, workdirs.format_marker(owner).strip()))


def session_argv(
    shape: argv.SandboxShape,
    directory: str,
    *,
    env_file: str,
    workspace_copy: str | None,
    max_upload_bytes: int,
    owner: workdirs.Owner | None,
    proxy_socket: str | None = None,
    egress_socket: str | None = None,
) -> list[str]:
    """``docker run`` of the session runtime of ``directory`` (its socket and runtime subdirectories
    made by the caller), set up and waiting for its hand-out line on stdin (``--prewarm``); with
    ``proxy_socket`` (and ``egress_socket``), behind a Docker step's relay to them."""
    if shape.image is None:
        raise ValueError("a Docker sandbox's shape names its image")
    root = layout.SANDBOX_HOME if workspace_copy is None else WORKSPACE_PATH
    command = (
        "python3", "-I", "-S", f"{RUNTIME_DIR}/server.py", "--unix", f"{SOCKET_DIR}/{_SOCKET}",
        "--isolate-commands", "--commands-share-uid", "--token-fd", "0", "--prewarm",
        "--workspace", root, "--max-upload-bytes", str(max_upload_bytes),
    )  # fmt: skip
    writable = [bwrap.WritableMount(os.path.join(directory, SOCKET_SUBDIR), SOCKET_DIR)]
    if workspace_copy is not None:
        writable.append(bwrap.WritableMount(workspace_copy, WORKSPACE_PATH))
    settings = docker.DockerSettings(
        command=command,
        image=shape.image,
        docker_path=shape.docker_path,
        podman_nproc=shape.podman_nproc,
        env_file=env_file,
        working_dir=root,
        home_size_bytes=shape.home_size_bytes,
        tmp_size_bytes=shape.tmp_size_bytes,
        read_only_mounts=(bwrap.ReadOnlyMount(os.path.join(directory, RUNTIME_SUBDIR), RUNTIME_DIR),),
        writable_mounts=tuple(writable),
        limits=shape.limits,
        labels=session_labels(directory, owner),
        init=True,
        proxy_socket=proxy_socket,
        proxy_port=environment.PROXY_PORT,
        egress=None if egress_socket is None else (environment.EGRESS_PORT, egress_socket),
        forwarder_script=None if proxy_socket is None else argv.node_forwarder(),
    )
    return docker.docker_argv(settings, docker.container_id(directory))


def stale(listed: Iterable[ListedContainer], gone: set[str]) -> list[str]:
    """The session containers a sweep removes: those that ended (a session never restarts) and
    those whose owner is in ``gone`` (surely dead); a container of a living owner (one it is
    starting, one it paused), or of an owner this machine cannot judge, is kept.

    >>> rows = [ListedContainer("a", "running", "o1"), ListedContainer("b", "exited", "o2"),
    ...         ListedContainer("c", "running", "o3"), ListedContainer("d", "created", "o4")]
    >>> stale(rows, {"o3"})
    ['b', 'c']
    """
    return [c.id for c in listed if c.state in _ENDED or c.owner in gone]
