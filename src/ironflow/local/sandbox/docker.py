"""Sandbox settings into a ``docker run`` argv and its environment file, with the pod's posture (pure).

The step runs in a container of a local image (the runner image by default), never pulled
(``--pull=never``): a read-only root, uid 10001 with every capability dropped and
``no-new-privileges``, the daemon's default seccomp profile, its own pid, IPC and UTS
namespaces, no network at all (``--network none``: only ``lo``), pids, memory (no swap) and CPU
limits, open-file and file-size rlimits, and size-bounded tmpfs for ``/tmp``, ``$HOME`` and
``/dev/shm``. Docker or Podman (through its Docker API) enforce it; the daemon keeps no log of
the step (``--log-driver none``): its output is read from the attached client only.

The auth proxy reaches the step as under bubblewrap: its unix socket (and the egress proxy's) is
bind-mounted at a fixed path, and a relay inside the container's own network namespace
(``forwarder.js``, run by the image's ``node``, which the runner image has for Claude Code)
listens on 127.0.0.1:<port> before it starts the command.

Invariant: no environment value is on the argv; the environment goes in a file the caller writes
into the run's private temp dir (``--env-file``), whose format carries no newline in a value.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ironflow import errors
from ironflow.claude import layout, profile
from ironflow.local.sandbox import bwrap
from ironflow.local.sandbox.limits import CPU_PERIOD_US, DEFAULT_LIMITS, SandboxLimits

__all__ = [
    "FORWARDER_PATH",
    "WRITABLE_NEEDS_ROOT",
    "DockerSettings",
    "container_id",
    "container_in",
    "docker_argv",
    "env_file",
]

#: Where the relay script appears in the container (the proxy sockets are bubblewrap's paths).
FORWARDER_PATH: Final = "/run/ironflow/forwarder.js"
#: The cpu-shares a sandbox gets without a CPU quota: half the default, as under the other runtimes.
_CPU_SHARES: Final = 512
#: A workspace's copy is given to the step's uid first, which only a root worker can do.
WRITABLE_NEEDS_ROOT: Final = (
    "a workspace or a writable mount under Docker needs a worker running as root (its copy is handed to the "
    "container's uid 10001 first): run as root or use isolation 'bwrap'"
)


@dataclass(frozen=True)
class DockerSettings:
    """Everything the argv depends on."""

    command: tuple[str, ...]
    image: str
    docker_path: str = "docker"
    #: The file :func:`env_file` wrote (on the host); the container's whole environment.
    env_file: str | None = None
    managed_settings_dir: str | None = None
    profile_dirs: tuple[str, ...] = ()
    working_dir: str | None = None
    home_size_bytes: int = bwrap.DEFAULT_HOME_SIZE_BYTES
    tmp_size_bytes: int = bwrap.DEFAULT_TMP_SIZE_BYTES
    uid: int = layout.SANDBOX_UID
    read_only_mounts: tuple[bwrap.ReadOnlyMount, ...] = ()
    writable_mounts: tuple[bwrap.WritableMount, ...] = ()
    limits: SandboxLimits = DEFAULT_LIMITS
    #: The auth proxy's socket on the host, bound at :data:`bwrap.PROXY_SOCKET_PATH`, and the relay's port.
    proxy_socket: str | None = None
    proxy_port: int = 0
    #: The egress proxy's port in the container and its socket on the host (a step with an egress policy).
    egress: tuple[int, str] | None = None
    #: The host file of ``forwarder.js``, bound at :data:`FORWARDER_PATH` (with a proxy only).
    forwarder_script: str | None = None
    #: The container's labels (a session's: what its sweep finds it by).
    labels: tuple[tuple[str, str], ...] = ()
    #: The daemon's init as pid 1 (``--init``), reaping what the command leaves (a session's runtime).
    init: bool = False
    #: Podman's Docker API (not None): its nproc limit, since Podman raises a limit it is not given
    #: to its maximum, which a host without ``CAP_SYS_RESOURCE`` refuses (``--pids-limit`` bounds the
    #: step below it); and the home's owner by Podman's ``U`` (it refuses a tmpfs's ``uid=``).
    podman_nproc: int | None = None


def container_id(sandbox_dir: str) -> str:
    """The container's name: unique per sandbox dir (one per sandbox, in a run's own temp dir), as a
    name must be on the daemon.

    >>> container_id("/tmp/ironflow-local-x/docker-1") == container_id("/tmp/ironflow-local-x/docker-2")
    False
    """
    return "ironflow-" + hashlib.sha256(sandbox_dir.encode()).hexdigest()[:16]


def container_in(argv: list[str]) -> str | None:
    """The container a ``docker run`` argv of :func:`docker_argv` names, or None for any other argv.

    >>> container_in(["docker", "run", "--name", "ironflow-1", "img", "true"])
    'ironflow-1'
    >>> container_in(["bwrap", "--name", "x"]) is None
    True
    """
    if argv[1:2] != ["run"] or "--name" not in argv:
        return None
    return argv[argv.index("--name") + 1]


def env_file(env: Mapping[str, str]) -> bytes:
    """``env`` as the lines ``docker run --env-file`` reads (``NAME=value``; a value is taken as it is).

    Raises:
        ConfigError: a value holding a newline, a carriage return or a NUL, which the file cannot carry
            (the value is never quoted), or a name that is not a process environment's.
    """
    lines = []
    for name, value in env.items():
        if not name or "=" in name or any(c.isspace() or c == "\0" for c in name):
            raise errors.ConfigError(f"env {errors.truncate(repr(name), 40)} cannot go to a Docker sandbox")
        if any(c in value for c in "\n\r\0"):
            raise errors.ConfigError(
                f"env {name} holds a line break or a NUL, which a Docker sandbox's environment file cannot carry"
            )
        lines.append(f"{name}={value}\n")
    return "".join(lines).encode()


def _check(settings: DockerSettings) -> None:
    bwrap.check_command_and_sizes(settings.command, settings.home_size_bytes, settings.tmp_size_bytes)
    targets: set[str] = set()
    every: list[bwrap.ReadOnlyMount | bwrap.WritableMount] = [*settings.read_only_mounts, *settings.writable_mounts]
    for mount in every:
        kind = "writable volume" if isinstance(mount, bwrap.WritableMount) else "read-only volume"
        problem = layout.mount_path_problem(kind, mount.target)
        if problem is not None:
            raise errors.ConfigError(problem)
        if not posixpath.isabs(mount.source) or "," in mount.source or "," in mount.target:
            raise errors.ConfigError(f"a Docker sandbox mounts an absolute host path without ',': '{mount.source}'")
        target = posixpath.normpath(mount.target)
        if target in targets:
            raise errors.ConfigError(f"duplicate volume mount path '{mount.target}'")
        targets.add(target)


def _bind(source: str, target: str, *, writable: bool = False) -> list[str]:
    options = "" if writable else ",readonly"
    return ["--mount", f"type=bind,source={source},target={target}{options}"]


def _tmpfs(target: str, size: int, mode: str, owner: int | None = None, *, podman: bool = False) -> list[str]:
    owned = "" if owner is None else ",U" if podman else f",uid={owner},gid={owner}"
    # Docker fills a --tmpfs with a copy of the image's directory there (its mode and owner too, the
    # runner's /home/claude is 10001's); the mode and owner given here hold where the image has none.
    return ["--tmpfs", f"{target}:rw,nosuid,nodev,size={size},mode={mode}{owned}"]


def _limits(limits: SandboxLimits) -> list[str]:
    cpu = (
        ["--cpu-period", str(CPU_PERIOD_US), "--cpu-quota", str(max(1000, int(limits.cpus * CPU_PERIOD_US)))]
        if limits.cpus is not None
        else ["--cpu-shares", str(_CPU_SHARES)]
    )
    return [
        "--pids-limit",
        str(limits.pids),
        "--memory",
        str(limits.memory_bytes),
        "--memory-swap",
        str(limits.memory_bytes),  # equal to --memory: no swap
        *cpu,
        "--ulimit",
        f"nofile={limits.open_files}:{limits.open_files}",
        "--ulimit",
        f"fsize={limits.file_size_bytes}:{limits.file_size_bytes}",
    ]


def docker_argv(settings: DockerSettings, name: str) -> list[str]:
    """The full argv: ``docker run`` of ``settings.command`` in a container called ``name``.

    Raises:
        ConfigError: a mount that is reserved, taken twice or not an absolute host path; a command or
            size that cannot work (:func:`bwrap.check_command_and_sizes`).
    """
    _check(settings)
    uid = settings.uid
    argv = [
        settings.docker_path,
        "run",
        "--name",
        name,
        "--interactive",  # stdin reaches the step (an empty one when it is given none)
        "--pull=never",  # a local image only: no registry is ever asked
        "--read-only",
        "--user",
        f"{uid}:{uid}",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",  # and the daemon's default seccomp profile: no --security-opt seccomp=…
        "--network",
        "none",
        "--ipc",
        "private",
        "--hostname",
        "ironflow-sandbox",
        "--log-driver",
        "none",  # the step's output goes to the attached client only, never into the daemon's files
        *_limits(settings.limits),
        "--shm-size",
        str(settings.tmp_size_bytes),
        *_tmpfs(layout.SANDBOX_TMP, settings.tmp_size_bytes, "1777"),
        *_tmpfs(layout.SANDBOX_HOME, settings.home_size_bytes, "0700", uid, podman=settings.podman_nproc is not None),
        *_tmpfs("/var/tmp", settings.tmp_size_bytes, "1777"),
        "--workdir",
        settings.working_dir or layout.SANDBOX_HOME,
    ]
    if settings.env_file is not None:
        argv += ["--env-file", settings.env_file]
    if settings.init:
        argv.append("--init")
    if settings.podman_nproc is not None:
        argv += ["--ulimit", f"nproc={settings.podman_nproc}:{settings.podman_nproc}"]
    for key, value in settings.labels:
        argv += ["--label", f"{key}={value}"]
    if settings.managed_settings_dir is not None:
        argv += _bind(settings.managed_settings_dir, layout.MANAGED_SETTINGS_DIR)
    for index, profile_dir in enumerate(settings.profile_dirs):
        argv += _bind(profile_dir, profile.profile_mount_path(index))
    for ro in settings.read_only_mounts:
        argv += _bind(ro.source, ro.target)
    for rw in settings.writable_mounts:
        argv += _bind(rw.source, rw.target, writable=True)
    command = settings.command
    if settings.proxy_socket is not None:
        if settings.forwarder_script is None:
            raise errors.ConfigError("a Docker sandbox with a proxy needs the relay script (forwarder_script)")
        argv += _bind(settings.proxy_socket, bwrap.PROXY_SOCKET_PATH)
        argv += _bind(settings.forwarder_script, FORWARDER_PATH)
        relay = [str(settings.proxy_port), bwrap.PROXY_SOCKET_PATH]
        if settings.egress is not None:
            argv += _bind(settings.egress[1], bwrap.EGRESS_SOCKET_PATH)
            relay += [str(settings.egress[0]), bwrap.EGRESS_SOCKET_PATH]
        command = ("node", FORWARDER_PATH, *relay, "--", *command)
    # The entrypoint is the command's own first word: whatever the image's entrypoint is, it never runs.
    return [*argv, "--entrypoint", command[0], settings.image, *command[1:]]
