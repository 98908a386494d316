"""Sandbox settings into a bubblewrap argv with the sandboxed pod's posture (pure).

The sandbox root is bubblewrap's own tmpfs, made read-only at the end; each top-level
entry of the host root is bound read-only into it, except :data:`HIDDEN_ROOT_ENTRIES`
(homes, ``/run`` with its sockets, ``/tmp``), which the sandbox never sees. ``/etc`` is
rebuilt the same way so that ``/etc/claude-code`` (managed settings) and
``/etc/ironflow/claude-profile/<i>`` can be mounted like the pod's ConfigMaps, and so
that ``/etc/shadow`` stays outside. HOME (``/home/claude``), ``/tmp`` and ``/dev/shm`` are
private, size-limited tmpfs; ``/dev`` (the usual device nodes), ``/home`` and ``/run`` are plain
directories of the read-only root. Every namespace is new (user, pid, ipc, uts,
net, cgroup), no capability is kept, the sandbox dies with its parent.

Few mounts, big ones last: bubblewrap re-reads ``/proc/self/mountinfo`` (the host's mounts and
the sandbox's so far) after each bind or remount, so a mount it can do without (a tmpfs made
read-only where a directory of the read-only root shows the same) is left out, and the host's
top-level binds, which bring their submounts, come after the small binds (device nodes, masks).

Invariant: no environment value is ever on the argv (``/proc/<pid>/cmdline`` is world
readable), nor in the environment of bubblewrap's own process: that process runs on the host,
in its network namespace, before seccomp, and a variable such as ``LD_PRELOAD`` given to it ran
a library there. bubblewrap gets a fixed environment of its own; the sandbox's comes in through
``--args FD`` (:func:`env_args`: ``--clearenv`` then one ``--setenv`` a variable, NUL-separated,
read from the launch's gate pipe and closed by bubblewrap), so only the sandboxed process ever has
it. With that gate the user namespace flags come through it too (:func:`gate_args`): an argv whose
gate closed empty is refused by bubblewrap, never run outside its cgroup.
The host listing this module needs (entries of ``/`` and ``/etc``) is passed in, so
the argv is a function of its inputs.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ironflow import errors
from ironflow.claude import layout

__all__ = [
    "DEFAULT_HOME_SIZE_BYTES",
    "DEFAULT_TMP_SIZE_BYTES",
    "EGRESS_SOCKET_PATH",
    "FORWARDER_PATH",
    "HIDDEN_ETC_ENTRIES",
    "HIDDEN_ROOT_ENTRIES",
    "MASKED_PATHS",
    "PROXY_SOCKET_PATH",
    "BwrapSettings",
    "HostEntry",
    "ReadOnlyMount",
    "WritableMount",
    "bwrap_argv",
    "check_command_and_sizes",
    "check_size",
    "env_args",
    "gate_args",
    "mask_problem",
    "relay_argv",
]

DEFAULT_HOME_SIZE_BYTES: Final = 1 << 30
DEFAULT_TMP_SIZE_BYTES: Final = 1 << 30

#: Top-level host entries the sandbox never sees: homes and credentials, runtime
#: sockets (a unix socket is reachable through the filesystem, whatever the network
#: namespace), and the mounts bubblewrap makes itself.
HIDDEN_ROOT_ENTRIES: Final = frozenset({"root", "home", "run", "tmp", "proc", "dev", "etc"})
#: Host ``/etc`` entries left out of the sandbox's ``/etc`` (password hashes, and the
#: managed-settings directory the step's own settings replace).
HIDDEN_ETC_ENTRIES: Final = frozenset({"shadow", "shadow-", "gshadow", "gshadow-", "claude-code", "ironflow"})
#: What the sandbox hides or makes itself, which a step's mount must not cover (at, above or under
#: one): a mount at ``/etc`` would undo the masks on ``/etc/shadow``, one at ``/run`` the relay's
#: directory, one at ``/home`` the private HOME.
MASKED_PATHS: Final = (
    *sorted(posixpath.join("/etc", name) for name in HIDDEN_ETC_ENTRIES),
    "/proc",
    "/dev",
    "/run/ironflow",
    layout.SANDBOX_HOME,
    layout.SANDBOX_TMP,
)
#: The device nodes the sandbox's /dev holds (bubblewrap's ``--dev`` set, without a pty), and its links.
_DEV_NODES: Final = ("null", "zero", "full", "random", "urandom", "tty")
_DEV_LINKS: Final = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)
#: Where the auth proxy's unix socket appears inside the sandbox.
PROXY_SOCKET_PATH: Final = "/run/ironflow/auth-proxy.sock"
#: Where the egress proxy's unix socket appears inside the sandbox (a step with an egress policy).
EGRESS_SOCKET_PATH: Final = "/run/ironflow/egress-proxy.sock"
#: Where the relay script appears inside the sandbox: a fixed path, because the package
#: may live anywhere on the host, /tmp (hidden in the sandbox) included.
FORWARDER_PATH: Final = "/run/ironflow/forwarder.py"


#: The namespaces the gate's content makes (:func:`gate_args`); on the argv when there is no gate.
_GATED_FLAGS: Final = (
    "--unshare-all",  # user, pid, ipc, uts, net, cgroup: only `lo` in the network namespace
    "--unshare-user",  # explicit: as root, --unshare-all alone keeps the host's user namespace
)


@dataclass(frozen=True)
class HostEntry:
    """One entry of a host directory: bound read-only, or recreated as the same symlink."""

    name: str
    symlink_target: str | None = None
    is_dir: bool = False


@dataclass(frozen=True)
class ReadOnlyMount:
    """A host path bound read-only at ``target`` inside the sandbox."""

    source: str
    target: str


@dataclass(frozen=True)
class WritableMount:
    """A host path bound read-write at ``target``: a workspace's private copy, or a directory
    the caller asked to share with the step (``ironflow exec --mount SRC:DST:rw``)."""

    source: str
    target: str


@dataclass(frozen=True)
class BwrapSettings:
    """Everything the argv depends on; listing the host is the caller's job."""

    command: tuple[str, ...]
    root_entries: tuple[HostEntry, ...]
    etc_entries: tuple[HostEntry, ...] = ()
    read_only_mounts: tuple[ReadOnlyMount, ...] = ()
    managed_settings_dir: str | None = None
    profile_dirs: tuple[str, ...] = ()
    proxy_socket: str | None = None
    #: The egress proxy's socket, bound at :data:`EGRESS_SOCKET_PATH` (a step with an egress policy).
    egress_socket: str | None = None
    #: The host file of :mod:`ironflow.local.sandbox.forwarder`, bound at :data:`FORWARDER_PATH`.
    forwarder_script: str | None = None
    working_dir: str | None = None
    home_size_bytes: int = DEFAULT_HOME_SIZE_BYTES
    tmp_size_bytes: int = DEFAULT_TMP_SIZE_BYTES
    uid: int = layout.SANDBOX_UID
    hostname: str = "ironflow-sandbox"
    bwrap_path: str = "bwrap"
    #: An open descriptor holding a seccomp BPF program (:mod:`ironflow.local.sandbox.seccomp`).
    seccomp_fd: int | None = None
    #: The gate bubblewrap reads its namespaces and the sandbox's environment from (:func:`gate_args`).
    env_fd: int | None = None
    #: A host directory bound read-write at ~/.claude/projects: Claude Code's conversations (the pod's
    #: conversations claim).
    conversations_dir: str | None = None
    #: Host paths bound read-write (after the read-only ones: a workspace at /workspace).
    writable_mounts: tuple[WritableMount, ...] = ()
    #: ``CAP_SYS_ADMIN`` in the sandbox's user namespace, for a session's runtime to put its commands in a
    #: pid namespace of their own before it drops every capability (``server.py --isolate-commands``).
    keep_sys_admin: bool = False
    #: A private ``/dev/pts`` (a new devpts instance, ``/dev/ptmx`` to it): a session's commands in a terminal.
    ptys: bool = False
    #: The sandbox dies with the process that started it (``--die-with-parent``); a session kept across
    #: its server's restart does not (it ends itself at its TTL: the runtime's ``expires_at``).
    die_with_parent: bool = True


def relay_argv(
    python: str, script: str, port: int, socket_path: str, egress: tuple[int, str] | None = None
) -> tuple[str, ...]:
    """The argv that runs the proxy relay (``ironflow.local.sandbox.forwarder`` at ``script``, as the sandbox sees
    it) under either runtime, and the egress proxy's relay (``egress``: port and socket) too; the step's
    command follows it."""
    second = (str(egress[0]), egress[1]) if egress is not None else ()
    return (python, "-I", "-S", script, str(port), socket_path, *second, "--")


def env_args(env: Mapping[str, str]) -> bytes:
    """``env`` as the NUL-separated arguments ``bwrap --args FD`` reads: ``--clearenv``, then
    ``--setenv NAME VALUE`` for each variable, so the sandbox gets ``env`` and nothing else.

    Raises:
        ConfigError: a name or value a NUL would split (it would read as more arguments), or a name
            with ``=`` (naming the variable, never quoting the value).
    """
    out = [b"--clearenv"]
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            shown = errors.truncate(repr(name), 40)
            raise errors.ConfigError(
                f"env {shown} cannot go to the sandbox: a NUL or '=' in its name, or a NUL in its value"
            )
        out += [b"--setenv", name.encode(), value.encode()]
    return b"".join(arg + b"\0" for arg in out)


def gate_args(env: Mapping[str, str]) -> bytes:
    """What bubblewrap reads from its gate (``--args FD``, :mod:`~ironflow.local.sandbox.spawn`): the
    user namespace the argv's ``--uid``/``--disable-userns`` require, then :func:`env_args`. A gate
    closed without them (the worker died before the cgroup was joined) is a refused argv, never a
    sandbox outside its limits."""
    return b"".join(flag.encode() + b"\0" for flag in _GATED_FLAGS) + env_args(env)


def _entries(base: str, entries: Iterable[HostEntry], hidden: frozenset[str]) -> list[str]:
    args: list[str] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name in hidden or "/" in entry.name or entry.name in ("", ".", ".."):
            continue
        path = posixpath.join(base, entry.name)
        if entry.symlink_target is not None:
            args += ["--symlink", entry.symlink_target, path]
        else:
            args += ["--ro-bind", path, path]
    return args


def _dev(shm_size_bytes: int, *, ptys: bool = False) -> list[str]:
    """``/dev`` as bubblewrap's ``--dev`` makes it, but a directory of the root (read-only with it)
    and with a sized ``/dev/shm``: ``--dev`` gives an unsized writable tmpfs (host memory without a
    limit). With ``ptys``, ``--dev`` itself (bubblewrap mounts devpts only so), made read-only: its
    devpts is a new instance, and its stdin is never a terminal (a session's is its hand-out pipe),
    so it binds no host terminal at ``/dev/console``."""
    shm = ["--perms", "1777", "--size", str(shm_size_bytes), "--tmpfs", "/dev/shm"]
    if ptys:
        return ["--dev", "/dev", *shm, "--remount-ro", "/dev"]
    args = ["--dir", "/dev"]
    for node in _DEV_NODES:
        args += ["--dev-bind", f"/dev/{node}", f"/dev/{node}"]
    for name, target in _DEV_LINKS:
        args += ["--symlink", target, f"/dev/{name}"]
    return [*args, *shm]


def _etc(settings: BwrapSettings) -> list[str]:
    """``/etc``: one read-only bind with the hidden entries masked, or, when the step
    brings managed settings or a profile (mount points that do not exist on the host),
    a tmpfs rebuilt entry by entry (about 40 ms more, so only then)."""
    if settings.managed_settings_dir is None and not settings.profile_dirs:
        args = ["--ro-bind", "/etc", "/etc"]
        for entry in sorted(settings.etc_entries, key=lambda e: e.name):
            if entry.name in HIDDEN_ETC_ENTRIES and entry.symlink_target is None:
                path = posixpath.join("/etc", entry.name)
                # A directory gets an empty tmpfs, a file /dev/null: present but empty.
                args += ["--tmpfs", path] if entry.is_dir else ["--ro-bind", "/dev/null", path]
        return args
    args = ["--tmpfs", "/etc", *_entries("/etc", settings.etc_entries, HIDDEN_ETC_ENTRIES)]
    if settings.managed_settings_dir is not None:
        args += ["--ro-bind", settings.managed_settings_dir, layout.MANAGED_SETTINGS_DIR]
    if settings.profile_dirs:
        from ironflow.claude import profile  # an agent step's profiles: a plain command loads none

        for index, profile_dir in enumerate(settings.profile_dirs):
            args += ["--ro-bind", profile_dir, profile.profile_mount_path(index)]
    return [*args, "--remount-ro", "/etc"]


def mask_problem(kind: str, target: str) -> str | None:
    """Why a step's ``kind`` mount at ``target`` would cover one of :data:`MASKED_PATHS`, or None.

    >>> mask_problem("read-only volume", "/etc")
    "read-only volume cannot be mounted at '/etc': it would uncover '/etc/claude-code', which the sandbox hides"
    >>> mask_problem("read-only volume", "/etc/ssl") is None
    True
    """
    norm = posixpath.normpath(target)
    for masked in MASKED_PATHS:
        if norm in ("/", masked) or masked.startswith(norm + "/") or norm.startswith(masked + "/"):
            return f"{kind} cannot be mounted at '{target}': it would uncover '{masked}', which the sandbox hides"
    return None


def check_command_and_sizes(command: Sequence[str], home_size_bytes: int, tmp_size_bytes: int) -> None:
    """Refuse an empty command or a non-positive tmpfs size (both runtimes share these rules).

    Raises:
        ConfigError: naming the setting and the value.
    """
    if not command:
        raise errors.ConfigError("the sandbox needs a command to run")
    check_size("home size limit", home_size_bytes)
    check_size("tmp size limit", tmp_size_bytes)


def check_size(name: str, size: int) -> None:
    """Refuse a tmpfs size that is not a positive number of bytes, naming the setting.

    Raises:
        ConfigError: ``size`` is zero or negative.
    """
    if size <= 0:
        raise errors.ConfigError(f"{name} must be a positive number of bytes, got {size}")


def bwrap_argv(settings: BwrapSettings) -> list[str]:
    """The full ``bwrap … -- COMMAND`` argv; raises ConfigError on an unusable setting."""
    check_command_and_sizes(settings.command, settings.home_size_bytes, settings.tmp_size_bytes)
    seen: set[str] = set()
    every: list[ReadOnlyMount | WritableMount] = [*settings.read_only_mounts, *settings.writable_mounts]
    for mount in every:
        kind = "writable volume" if isinstance(mount, WritableMount) else "read-only volume"
        # The rule every backend shares, then this sandbox's own masks.
        problem = layout.mount_path_problem(kind, mount.target) or mask_problem(kind, mount.target)
        if problem is not None:
            raise errors.ConfigError(problem)
        norm = posixpath.normpath(mount.target)
        if norm in seen:
            raise errors.ConfigError(f"duplicate volume mount path '{mount.target}'")
        seen.add(norm)
    uid = str(settings.uid)
    argv = [settings.bwrap_path, *(["--args", str(settings.env_fd)] if settings.env_fd is not None else [])]
    argv += [
        *(_GATED_FLAGS if settings.env_fd is None else ()),  # else in the gate (:func:`gate_args`)
        "--disable-userns",  # no nested user namespace (the pod's RuntimeDefault seccomp refuses them too)
        *(["--die-with-parent"] if settings.die_with_parent else []),
        "--new-session",  # no TIOCSTI into the caller's terminal
        "--cap-drop",
        "ALL",
        *(["--cap-add", "CAP_SYS_ADMIN"] if settings.keep_sys_admin else []),
        "--uid",
        uid,
        "--gid",
        uid,
        "--hostname",
        settings.hostname,
    ]
    if settings.seccomp_fd is not None:
        argv += ["--seccomp", str(settings.seccomp_fd)]
    argv += ["--proc", "/proc", *_dev(settings.tmp_size_bytes, ptys=settings.ptys)]
    argv += _etc(settings)
    # /home and /run are directories of the root, read-only with it (no tmpfs of their own to remount).
    argv += ["--dir", "/home"]
    argv += ["--perms", "0700", "--size", str(settings.home_size_bytes), "--tmpfs", layout.SANDBOX_HOME]
    if settings.conversations_dir is not None:
        argv += ["--bind", settings.conversations_dir, layout.CONVERSATIONS_MOUNT_PATH]  # the one writable host path
    argv += ["--perms", "1777", "--size", str(settings.tmp_size_bytes), "--tmpfs", layout.SANDBOX_TMP]
    argv += ["--dir", "/run"]
    if settings.proxy_socket is not None:
        argv += ["--ro-bind", settings.proxy_socket, PROXY_SOCKET_PATH]
    if settings.egress_socket is not None:
        argv += ["--ro-bind", settings.egress_socket, EGRESS_SOCKET_PATH]
    if settings.forwarder_script is not None:
        argv += ["--ro-bind", settings.forwarder_script, FORWARDER_PATH]
    # The host's top-level binds after the small ones: each later bind re-reads their submounts.
    argv += _entries("/", settings.root_entries, HIDDEN_ROOT_ENTRIES)
    # Parents first: a mount under another's target must come after it, or it is covered.
    for mount in sorted(every, key=lambda m: posixpath.normpath(m.target).count("/")):
        argv += ["--bind" if isinstance(mount, WritableMount) else "--ro-bind", mount.source, mount.target]
    # Read-only only now: the mounts above may need mount points under /run, /home or /dev.
    argv += ["--remount-ro", "/"]
    argv += ["--chdir", settings.working_dir or layout.SANDBOX_HOME]
    return [*argv, "--", *settings.command]
