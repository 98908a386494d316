"""A local sandbox's command line, rendered from the provider's shape: the runtime's argv
(bubblewrap or ``runsc run``), the fds it reads (the seccomp program, bubblewrap's environment
for the sandbox), and on a root worker the binds its first process stages for the dropped uid;
and how to tell the runtime's own failures from the step's.

It reads the host's ``/`` and ``/etc`` listings and writes the managed settings and gVisor's
bundle (its OCI spec) into the run's temp dir; the argv itself comes from the pure
:mod:`~ironflow.local.sandbox.bwrap` and :mod:`~ironflow.local.sandbox.gvisor` builders. Nothing here starts a process.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ironflow import errors
from ironflow.claude import layout
from ironflow.local.sandbox import bwrap, environment, identity, seccomp, spawn
from ironflow.local.sandbox import limits as sandbox_limits

if TYPE_CHECKING:
    from ironflow.local.sandbox import gvisor

__all__ = [
    "FORWARDER_FILE",
    "SandboxFds",
    "SandboxShape",
    "command_exit_code",
    "host_entries",
    "mount_problem",
    "node_forwarder",
    "proxy_bridge",
    "raise_if_sandbox_failed",
    "render",
    "sandbox_fds",
    "tool_problem",
    "which",
]

log = logging.getLogger("ironflow.local")

#: The relay a sandbox with a proxy runs by path (:mod:`~ironflow.local.sandbox.forwarder`, a sibling
#: file): named, not imported, since its module loads ctypes and threads for the relay's own process.
FORWARDER_FILE: Final = os.path.join(os.path.dirname(os.path.realpath(__file__)), "forwarder.py")

_RUNSC_FAILURE: Final = re.compile(r"(starting|running|creating) (root )?container: ")


@dataclass(frozen=True)
class SandboxShape:
    """What the provider's settings say about every sandbox it starts."""

    isolation: environment.Isolation
    profiles: tuple[environment.LocalProfile, ...]
    home_size_bytes: int
    tmp_size_bytes: int
    conversations_dir: str | None
    host_uid: int | None
    #: The host uid that must own what the sandbox writes (a workspace's copy, a writable mount): on a
    #: root worker the sandbox's uid under either runtime; None where the worker's own files are writable.
    writable_uid: int | None = None
    #: The provider's limits (under gVisor the step's rlimits are in its spec).
    limits: sandbox_limits.SandboxLimits = sandbox_limits.DEFAULT_LIMITS
    #: Under Docker: the local image the step runs in, and the client that starts it.
    image: str | None = None
    docker_path: str = "docker"
    #: Under Podman's Docker API: no tmpfs owner, the worker's hard nproc limit (:class:`docker.DockerSettings`).
    podman_nproc: int | None = None


@dataclass(frozen=True)
class SandboxFds:
    """The descriptors bubblewrap reads as it starts (none under gVisor, whose spec holds the env)."""

    seccomp: int | None = None
    #: bubblewrap's gate (``bwrap --args``): its namespaces and the sandbox's environment
    #: (:func:`bwrap.gate_args`), released once it is in its cgroup (:mod:`~ironflow.local.sandbox.spawn`).
    gate: spawn.Gate | None = None

    @property
    def env(self) -> int | None:
        """The fd bubblewrap reads its gate from."""
        return None if self.gate is None else self.gate.read_fd

    @property
    def inherited(self) -> tuple[int, ...]:
        """What the runtime's process must inherit."""
        return tuple(fd for fd in (self.seccomp, self.env) if fd is not None)


def host_entries(directory: str) -> tuple[bwrap.HostEntry, ...]:
    out = []
    with os.scandir(directory) as it:
        for e in it:
            link = os.readlink(e.path) if e.is_symlink() else None
            out.append(bwrap.HostEntry(e.name, link, e.is_dir(follow_symlinks=False)))
    return tuple(out)


def mount_problem(isolation: environment.Isolation, mount: bwrap.ReadOnlyMount) -> str | None:
    """Why ``isolation`` cannot show read-only ``mount`` to the step, or None (agent steps and plain commands)."""
    problem = layout.mount_path_problem("read-only volume", mount.target)
    if problem is not None:
        return problem
    if isolation == "docker":  # the daemon makes any mount point in the container
        return None
    if isolation == "gvisor":
        from ironflow.local.sandbox import gvisor  # gVisor's runs only load its module

        moved = os.path.normpath(mount.source) != os.path.normpath(mount.target)
        if moved and not os.path.isdir(mount.source):  # a bind's mount point must already be there
            return f"gVisor isolation mounts a host path elsewhere only if it is a directory: '{mount.source}'"
        return gvisor.host_path_problem(mount.source, mount.target)
    problem = bwrap.mask_problem("read-only volume", mount.target)
    if problem is not None:
        return problem
    top = "/" + mount.target.strip("/").split("/")[0]
    if not environment.hidden_from_sandbox(mount.target) and os.path.lexists(top) and not os.path.isdir(mount.target):
        # bubblewrap cannot create a mount point inside a read-only host directory.
        return (
            f"read-only volume cannot be mounted at '{mount.target}': '{top}' comes read-only from "
            f"the host and has no such directory; use a path under a new top-level directory such as /data"
        )
    return None


def tool_problem(isolation: environment.Isolation, tool: str) -> str | None:
    """Why the step cannot run host ``tool`` (Claude Code, the relay's Python) where it is, or None.

    A tool is shown at its own path; under a path the sandbox replaces with its own (``/tmp``, its
    home, ``/run/ironflow``; under gVisor also ``/home``, ``/var/tmp``, ``/run``) it would be hidden.

    >>> tool_problem("bwrap", "/tmp/cache/ironflow/claude-code/2.1.332/bin/claude").split(",")[0]
    "'/tmp/cache/ironflow/claude-code/2.1.332/bin/claude' lies under '/tmp'"
    >>> tool_problem("bwrap", "/usr/bin/python3") is None
    True
    """
    root = environment.tool_root(tool) if environment.hidden_from_sandbox(tool) else tool
    norm = os.path.normpath(root)
    covered = list(layout.RESERVED_MOUNT_PATHS)
    if isolation == "gvisor":
        from ironflow.local.sandbox import gvisor

        covered += gvisor.SETUP_TMPFS
    under = next((c for c in covered if norm == c or norm.startswith(c + "/")), None)
    if under is None or under in layout.SANDBOX_PATH_DIRS:  # /usr/bin and the like: the host's, read-only
        return None
    return (
        f"'{tool}' lies under '{under}', which every sandbox replaces with its own: install it elsewhere "
        f"(scripts/install puts Claude Code under XDG_CACHE_HOME, so an XDG_CACHE_HOME outside '{under}')"
    )


def which(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        package = "bubblewrap" if name == "bwrap" else name
        raise errors.SandboxError(f"{name} is not installed: install it (apt-get install -y {package})")
    return found


def render(
    shape: SandboxShape,
    cmd: tuple[str, ...],
    *,
    tmp: str | None,
    working_dir: str | None,
    mounts: tuple[bwrap.ReadOnlyMount, ...],
    proxy_socket: str | None,
    env: Mapping[str, str],
    writable: tuple[bwrap.WritableMount, ...] = (),
    extra_tools: tuple[str, ...] = (),
    fds: SandboxFds = SandboxFds(),
    managed: Mapping[str, Any] | None = None,
    keep_sys_admin: bool = False,
    egress_socket: str | None = None,
    ptys: bool = False,
    die_with_parent: bool = True,
) -> tuple[list[str], tuple[tuple[bytes, bytes], ...]]:
    """The runtime's argv, and on a root worker the binds its first process stages. ``managed``
    settings and gVisor's bundle (its spec holds ``env``) are written into the run's temp dir
    ``tmp`` (None when neither is needed: bubblewrap without managed settings); bubblewrap's
    sandbox gets ``env`` through ``fds.env`` (from :func:`sandbox_fds`); ``keep_sys_admin`` is
    :attr:`bwrap.BwrapSettings.keep_sys_admin`, ``ptys`` and ``die_with_parent`` its own; ``egress_socket`` (with
    ``proxy_socket``) is the egress proxy's, relayed at :data:`environment.EGRESS_PORT`."""
    managed_dir: str | None = None
    if managed is not None:
        managed_dir = os.path.join(_run_dir(tmp), "managed-settings")
        os.mkdir(managed_dir)
        target = os.path.join(managed_dir, layout.MANAGED_SETTINGS_FILE)
        Path(target).write_text(json.dumps(managed, indent=2))
    profile_dirs = tuple(p.path for p in shape.profiles)
    if shape.isolation == "docker":
        egress = (environment.EGRESS_PORT, egress_socket) if egress_socket is not None else None
        return _docker_argv(shape, cmd, _run_dir(tmp), env, managed_dir, profile_dirs, working_dir, mounts, writable,
                            proxy_socket, egress), ()  # fmt: skip
    python = os.path.realpath(sys.executable)
    script = FORWARDER_FILE
    tools = (*extra_tools, python) if proxy_socket is not None else extra_tools
    for tool in tools:  # under gVisor the relay's Python runs outside it
        problem = tool_problem("bwrap" if tool == python else shape.isolation, tool)
        if problem is not None:
            raise errors.ConfigError(problem)
    if shape.isolation == "gvisor":
        from ironflow.local.sandbox import gvisor

        run_dir = _run_dir(tmp)  # the bundle's place, checked before any binary is looked up
        # The step's mounts are the spec's binds, by their real paths (runsc resolves no symlink in a
        # bind's mount point); the tools are seen where they are on the host root.
        mounts = tuple(
            m if os.path.normpath(m.source) == os.path.normpath(m.target) else
            bwrap.ReadOnlyMount(os.path.realpath(m.source), m.target)
            for m in mounts
        )  # fmt: skip
        writable = tuple(bwrap.WritableMount(os.path.realpath(m.source), m.target) for m in writable)
        bridge = None if proxy_socket is None else proxy_bridge(proxy_socket, egress_socket)
        shown = gvisor.GvisorSettings(
            command=cmd,
            managed_settings_dir=managed_dir,
            profile_dirs=profile_dirs,
            working_dir=working_dir,
            home_size_bytes=shape.home_size_bytes,
            tmp_size_bytes=shape.tmp_size_bytes,
            traverse=tools,
            proxy=bridge,
            runsc_path=which("runsc"),
            read_only_mounts=mounts,
            writable_mounts=writable,
            limits=shape.limits,
        )
        return gvisor.gvisor_argv(shown, _gvisor_bundle(run_dir, shown, env)), ()
    # Each tool's package or interpreter prefix, at the same path, read-only, once, unless a
    # mount of the step takes that path; the step's own mounts are bwrap_argv's to judge.
    taken = {os.path.normpath(m.target) for m in mounts}
    exposed: dict[str, bwrap.ReadOnlyMount] = {}
    for tool in tools:
        if environment.hidden_from_sandbox(tool):
            root = environment.tool_root(tool)
            if root not in taken:
                exposed.setdefault(root, bwrap.ReadOnlyMount(root, root))
    read_only = (*exposed.values(), *mounts)
    forwarder_script = script if proxy_socket is not None else None
    conversations_dir = shape.conversations_dir
    binds: tuple[tuple[bytes, bytes], ...] = ()
    if shape.host_uid is not None:  # every source, staged where the dropped uid reaches it
        for owned in (proxy_socket, egress_socket):
            if owned is not None:
                os.chown(owned, shape.host_uid, shape.host_uid)
                os.chmod(owned, 0o600)
        optional = (managed_dir, proxy_socket, forwarder_script, conversations_dir, egress_socket)
        sources = [
            *(m.source for m in read_only),
            *(w.source for w in writable),
            *profile_dirs,
            *(p for p in optional if p is not None),
        ]
        plan = identity.stage_plan(sources)
        binds = identity.binds(plan)
        read_only = tuple(bwrap.ReadOnlyMount(plan[m.source], m.target) for m in read_only)
        writable = tuple(bwrap.WritableMount(plan[m.source], m.target) for m in writable)
        profile_dirs = tuple(plan[p] for p in profile_dirs)
        managed_dir, proxy_socket, forwarder_script, conversations_dir, egress_socket = (
            None if p is None else plan[p] for p in optional
        )
    full_cmd = cmd
    if proxy_socket is not None:  # the relay as the sandbox sees it: socket and script at fixed paths
        egress_relay = (environment.EGRESS_PORT, bwrap.EGRESS_SOCKET_PATH) if egress_socket is not None else None
        relay = bwrap.relay_argv(
            python, bwrap.FORWARDER_PATH, environment.PROXY_PORT, bwrap.PROXY_SOCKET_PATH, egress_relay
        )
        full_cmd = (*relay, *cmd)
    return bwrap.bwrap_argv(
        bwrap.BwrapSettings(
            command=full_cmd,
            root_entries=host_entries("/"),
            etc_entries=host_entries("/etc"),
            read_only_mounts=read_only,
            writable_mounts=writable,
            managed_settings_dir=managed_dir,
            profile_dirs=profile_dirs,
            proxy_socket=proxy_socket,
            egress_socket=egress_socket if proxy_socket is not None else None,
            forwarder_script=forwarder_script,
            working_dir=working_dir,
            home_size_bytes=shape.home_size_bytes,
            tmp_size_bytes=shape.tmp_size_bytes,
            bwrap_path=which("bwrap"),
            seccomp_fd=fds.seccomp,
            env_fd=fds.env,
            conversations_dir=conversations_dir,
            keep_sys_admin=keep_sys_admin,
            ptys=ptys,
            die_with_parent=die_with_parent,
        )
    ), binds


def proxy_bridge(proxy_socket: str, egress_socket: str | None = None) -> gvisor.ProxyBridge:
    """gVisor's relay to the proxy's socket (and the egress proxy's), run by this Python outside it."""
    from ironflow.local.sandbox import gvisor

    egress = (environment.EGRESS_PORT, egress_socket) if egress_socket is not None else None
    python, script = os.path.realpath(sys.executable), FORWARDER_FILE
    return gvisor.ProxyBridge(environment.PROXY_PORT, proxy_socket, python, script, which("bwrap"), egress=egress)


def node_forwarder() -> str:
    """The host file of the relay a Docker sandbox runs (``forwarder.js``, by the image's ``node``)."""
    return os.path.join(os.path.dirname(FORWARDER_FILE), "forwarder.js")


def _gvisor_bundle(tmp: str, shown: gvisor.GvisorSettings, env: Mapping[str, str]) -> str:
    """Write the OCI bundle ``runsc run`` starts from (its spec, a directory for its state); its path."""
    from ironflow.local.sandbox import gvisor

    # One per sandbox: a run dir can hold several (a git workspace's clone, the step, its push).
    bundle = tempfile.mkdtemp(prefix="gvisor-", dir=tmp)  # mode 0700
    os.mkdir(os.path.join(bundle, "state"), 0o700)
    # 0600 in a 0700 directory: the spec holds the step's environment (its proxy token).
    fd = os.open(os.path.join(bundle, "config.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as spec:
        json.dump(gvisor.oci_spec(shown, env), spec)
    return bundle


def _docker_argv(
    shape: SandboxShape,
    cmd: tuple[str, ...],
    run_dir: str,
    env: Mapping[str, str],
    managed_dir: str | None,
    profile_dirs: tuple[str, ...],
    working_dir: str | None,
    mounts: tuple[bwrap.ReadOnlyMount, ...],
    writable: tuple[bwrap.WritableMount, ...],
    proxy_socket: str | None,
    egress: tuple[int, str] | None,
) -> list[str]:
    """``docker run`` of ``cmd``; its environment file is written into a dir of its own in the run's temp dir."""
    from ironflow.local.sandbox import docker  # only a Docker sandbox loads it

    if shape.image is None:
        raise ValueError("a Docker sandbox's shape names its image")
    sandbox_dir = tempfile.mkdtemp(prefix="docker-", dir=run_dir)  # mode 0700: one per sandbox, as its name
    env_path = os.path.join(sandbox_dir, "env")
    # 0600 in a 0700 directory: the file holds the step's environment (its proxy token).
    fd = os.open(env_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(docker.env_file(env))
    for socket_path in (proxy_socket, *(() if egress is None else (egress[1],))):
        if socket_path is not None:  # the container's uid connects; the host reaches no further than the 0700 run dir
            os.chmod(socket_path, 0o666)  # noqa: S103 - in a 0700 dir: only the container gets to it
    settings = docker.DockerSettings(
        command=cmd,
        image=shape.image,
        docker_path=shape.docker_path,
        podman_nproc=shape.podman_nproc,
        env_file=env_path,
        managed_settings_dir=managed_dir,
        profile_dirs=profile_dirs,
        working_dir=working_dir,
        home_size_bytes=shape.home_size_bytes,
        tmp_size_bytes=shape.tmp_size_bytes,
        read_only_mounts=tuple(bwrap.ReadOnlyMount(os.path.realpath(m.source), m.target) for m in mounts),
        writable_mounts=tuple(bwrap.WritableMount(os.path.realpath(m.source), m.target) for m in writable),
        limits=shape.limits,
        proxy_socket=proxy_socket,
        proxy_port=environment.PROXY_PORT,
        egress=egress,
        forwarder_script=node_forwarder(),
    )
    return docker.docker_argv(settings, docker.container_id(sandbox_dir))


def _run_dir(tmp: str | None) -> str:
    """The run's temp dir, which only the writes that need one ask for."""
    if tmp is None:
        raise ValueError("managed settings and gVisor's bundle are written to the run's temp dir: pass tmp")
    return tmp


@functools.cache
def _bwrap_filter() -> bytes | None:
    """bubblewrap's seccomp program, built once; None on a machine it does not cover (logged once)."""
    machine = os.uname().machine  # platform.machine(), without its module's import
    program = seccomp.filter_program(machine)
    if program is None:
        log.warning("no seccomp filter for %s: the bubblewrap sandbox runs without one", machine)
    return program


@contextlib.contextmanager
def sandbox_fds(isolation: environment.Isolation, env: Mapping[str, str]) -> Iterator[SandboxFds]:
    """For one bubblewrap run, the seccomp program in a fresh memfd and the gate that carries ``env``
    (:func:`bwrap.gate_args`), both read by bubblewrap to the end; nothing under gVisor (its spec holds ``env``).

    Raises:
        ConfigError: ``env`` holds a name or value no environment can carry.
    """
    if isolation != "bwrap":
        yield SandboxFds()
        return
    program = _bwrap_filter()
    content = bwrap.gate_args(env)  # refuses a bad env before any fd is made
    with contextlib.ExitStack() as stack:
        seccomp_fd = None if program is None else stack.enter_context(_memfd("ironflow-seccomp", program))
        gate = spawn.Gate(content)
        stack.callback(gate.close)
        yield SandboxFds(seccomp_fd, gate)


@contextlib.contextmanager
def _memfd(name: str, data: bytes) -> Iterator[int]:
    """``data`` in a memfd (close-on-exec: handed on by ``pass_fds`` only), read from its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def command_exit_code(code: int, stderr: str) -> int:
    """A plain command bubblewrap could not execute is the command's failure, as in a shell and
    under gVisor: 127 when it does not exist, 126 when it cannot run (bwrap itself exits 1)."""
    first = (stderr.strip().splitlines() or [""])[0]
    if code != 1 or not first.startswith("bwrap: execvp "):
        return code
    return 127 if first.endswith(": No such file or directory") else 126


def raise_if_sandbox_failed(code: int, stderr: str, isolation: environment.Isolation) -> None:
    """Tell the runtime's own failures from the step's: a root worker's first process says
    ``ironflow-enter: …`` (exit 125, :mod:`~ironflow.local.sandbox.spawn`), bubblewrap ``bwrap: …`` (exit 1),
    gVisor's setup says :data:`gvisor.SETUP_FAILED` (exit 125), runsc ``… container: …`` (128), the
    docker client ``docker: …`` and the relay in its container ``forwarder.js: cannot …`` (125)."""
    if code == 0:
        return
    from ironflow.local.sandbox import gvisor  # a failure's words only: a bubblewrap run loads it no sooner

    lines = stderr.strip().splitlines()
    first = lines[0] if lines else ""
    if isolation == "docker":
        if code == 125 and first.startswith(("docker: ", "forwarder.js: cannot")):
            raise errors.SandboxError(f"the docker sandbox could not start the step: {errors.truncate(first, 500)}")
        return
    if code == 125 and first.startswith(spawn.ENTER_FAILED):  # before bubblewrap: nothing of the step ran
        raise errors.SandboxError(f"could not put the sandbox in its cgroup and limits: {errors.truncate(first, 500)}")
    runsc_failed = code == 128 and any(_RUNSC_FAILURE.match(line) for line in lines)
    setup_failed = code == 125 and any(line.startswith(gvisor.SETUP_FAILED) for line in lines)
    bwrap_failed = first.startswith("bwrap:") and code == 1
    if bwrap_failed or runsc_failed or setup_failed:
        reason = next((line for line in lines if _RUNSC_FAILURE.match(line) or gvisor.SETUP_FAILED in line), first)
        raise errors.SandboxError(f"the {isolation} sandbox could not start the step: {errors.truncate(reason, 500)}")
