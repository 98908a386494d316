"""Sandbox settings into a gVisor (``runsc run``) argv and OCI spec with the pod's posture (pure).

``runsc run`` starts the spec's process inside gVisor's own kernel, with the host root
read-only under a writable in-memory overlay (``--overlay2=root:memory``), ``/proc``, a
``/dev`` of gVisor's devices, a read-only ``/sys``, and the step's host directories as OCI bind
mounts at their own host paths (read-only, or read-write: a workspace's private copy, written
through to the host as the step's uid, so a root worker gives that copy to uid 10001 first).

What runsc can do itself is the spec's (:func:`oci_spec`): the private size-limited tmpfs over
``/home`` (with ``/home/claude`` owned by uid 10001), ``/tmp``, ``/var/tmp`` and ``/run``
(``"type": "tmpfs"`` mounts: runsc makes their mount points in its own overlay, never on the
host); and for a step with nothing to do as root, the step's uid and gid with no
supplementary group, no capability in any set and ``noNewPrivileges``: its process is a shell
of the step's uid, which only changes directory and execs the command (a missing program is then the
shell's exit 127 and an unrunnable one 126, not runsc's failure to start, exit 128).

What runsc cannot do stays in the setup script (:func:`setup_script`), run as gVisor's root
(never the host's) with only the capabilities it needs, which then drops to uid 10001 with no
capability and ``no_new_privs`` (``setpriv``) and execs the command: a bind whose target is not
its source is bound on inside (runsc makes a bind's mount point in the host's own root: the
overlay is the sentry's, not the gofer's); the managed settings and profiles are copied to where
the pod mounts them (rootless runsc shows the worker's files as root's, their modes kept, so
the step's uid could not read a 0700 temp dir bound there); a 0700 home holding a tool gets o+x
in the overlay; a session's runtime, which drops by itself. A tmpfs over a host path the script still reads (a
copy's or a bind's source) is the script's too, after the read, and ``/run`` then comes last
(util-linux's mount records state under it, which must start empty). The spec's
``linux.seccomp`` section (``--oci-seccomp``) holds the user-namespace rules of
:mod:`ironflow.local.sandbox.seccomp`, so a nested user namespace is refused as under bubblewrap.

Network: ``--network=none`` (only ``lo``). With the auth proxy, ``runsc`` runs inside a
fresh network namespace made by bubblewrap (``--unshare-net``: only ``lo``) with
``--network=host``, behind the relay of :mod:`ironflow.local.sandbox.forwarder`: the step reaches
127.0.0.1:<port> and nothing else (gVisor's own sandbox networking does not work on
these hosts). Invariant: no environment value is on the argv, nor in the environment of
``runsc`` or the relay on the host (they get a fixed one); it is in the spec, which the caller
writes into the run's private temp dir.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ironflow import errors
from ironflow.claude import layout
from ironflow.local.sandbox import bwrap, seccomp
from ironflow.local.sandbox.limits import DEFAULT_LIMITS, SandboxLimits, oci_rlimits

__all__ = [
    "OUT_OF_TASKS",
    "SETUP_CAPABILITIES",
    "SETUP_FAILED",
    "SETUP_TMPFS",
    "WRITABLE_NEEDS_ROOT",
    "GvisorSettings",
    "ProxyBridge",
    "bind_mounts",
    "container_id",
    "gvisor_argv",
    "host_path_problem",
    "kernel_death",
    "oci_spec",
    "script_tmpfs",
    "setup_script",
    "tmpfs_mounts",
]

#: What the setup script prints (then exit 125) when one of its lines fails.
SETUP_FAILED: Final = "ironflow-sandbox: setup failed"
#: What a sandbox whose gVisor kernel died for want of host tasks says last (on stderr).
OUT_OF_TASKS: Final = (
    "ironflow-sandbox: gVisor's kernel stopped: the sandbox spent its budget of {pids} host tasks "
    "(the pids limit; under gVisor each process of the step costs about ten)"
)
#: Go's words (runsc's ``--panic-log``) when its kernel cannot start a host thread or stub process.
_NO_HOST_TASK: Final = re.compile(
    rb"^(panic: .*resource temporarily unavailable|runtime: failed to create new OS thread)", re.MULTILINE
)
#: A Go panic of gVisor's kernel (runsc's ``--panic-log``), whatever its words.
_PANIC: Final = re.compile(rb"^panic: ", re.MULTILINE)
#: As a non-root worker, rootless runsc shows the worker's files as root's: the step's uid cannot write them.
WRITABLE_NEEDS_ROOT: Final = (
    "a workspace or a writable mount under gVisor needs a worker running as root (rootless runsc shows a "
    "non-root worker's files as root's, which the step's uid cannot write): run as root or use isolation 'bwrap'"
)
#: What the setup script may do as gVisor's root, and no more: mount its tmpfs, copy and chmod
#: across owners, then drop to the step's uid (setpriv clears them all before the step runs).
SETUP_CAPABILITIES: Final = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_SETUID",
    "CAP_SYS_ADMIN",
)
#: Parents of the tools the step needs under a 0700 home (/root): given o+x in the
#: overlay only (the host is untouched), so uid 10001 can reach those paths and no more.
_TRAVERSE_ROOTS: Final = ("/root",)
#: Where the sandbox has its own tmpfs (the spec's or the setup script's): host paths under them are hidden.
SETUP_TMPFS: Final = ("/home", layout.SANDBOX_TMP, "/var/tmp", "/run")


@dataclass(frozen=True)
class ProxyBridge:
    """The relay from 127.0.0.1:<port> in the sandbox's namespace to the proxy socket."""

    port: int
    socket_path: str
    python: str
    forwarder_script: str
    #: bubblewrap makes the relay's network namespace: needed with a proxy only.
    bwrap_path: str = "bwrap"
    #: The egress proxy's port in the sandbox and its socket (a step with an egress policy).
    egress: tuple[int, str] | None = None


@dataclass(frozen=True)
class GvisorSettings:
    """Everything the argv depends on."""

    command: tuple[str, ...]
    managed_settings_dir: str | None = None
    profile_dirs: tuple[str, ...] = ()
    working_dir: str | None = None
    home_size_bytes: int = bwrap.DEFAULT_HOME_SIZE_BYTES
    tmp_size_bytes: int = bwrap.DEFAULT_TMP_SIZE_BYTES
    uid: int = layout.SANDBOX_UID
    traverse: tuple[str, ...] = ()
    proxy: ProxyBridge | None = None
    runsc_path: str = "runsc"
    #: ``--host-uds=create``: the sandbox may create unix sockets in its host bind mounts (a session's).
    host_uds_create: bool = False
    #: Host directories bound into the sandbox (OCI bind mounts, made before the setup script runs).
    read_only_mounts: tuple[bwrap.ReadOnlyMount, ...] = ()
    writable_mounts: tuple[bwrap.WritableMount, ...] = ()
    #: The provider's limits: the step's rlimits are the spec's (:func:`~ironflow.local.sandbox.limits.oci_rlimits`).
    limits: SandboxLimits = DEFAULT_LIMITS
    #: The command starts as gVisor's root and drops to the step's uid itself, in its own way (no
    #: ``setpriv``): a session's runtime, which binds its socket first, in a directory the step
    #: cannot enter, and whose real and saved uid stay apart from its commands'.
    drops_itself: bool = False
    #: The option by which such a command opens a 0700 home for traversal itself, as root (the runtime's
    #: ``--traverse``): with it and no other work for root, the spec runs the command with no setup shell.
    traverse_option: str | None = None


def host_path_problem(source: str, target: str) -> str | None:
    """Why the step cannot see host path ``source`` at ``target`` under gVisor, or None.

    The sandbox covers :data:`SETUP_TMPFS` with its own tmpfs, so a target there would be
    hidden: refused rather than silently dropped.
    """
    norm = posixpath.normpath(target)
    for hidden in SETUP_TMPFS:
        if norm == hidden or norm.startswith(hidden + "/"):
            return (
                f"gVisor isolation hides '{hidden}' under the sandbox's own tmpfs: '{source}' cannot be shown "
                f"at '{target}'; use a path outside it or isolation='bwrap'"
            )
    return None


def _mounts(settings: GvisorSettings) -> list[bwrap.ReadOnlyMount | bwrap.WritableMount]:
    """The step's mounts, checked, parents first (a mount under another's target comes after it).

    Raises:
        ConfigError: a target that is reserved, hidden by the setup's tmpfs, or taken twice; a
            source given twice (it is bound once, read-only or writable).
    """
    targets: set[str] = set()
    sources: set[str] = set()
    every: list[bwrap.ReadOnlyMount | bwrap.WritableMount] = [*settings.read_only_mounts, *settings.writable_mounts]
    for mount in every:
        kind = "writable volume" if isinstance(mount, bwrap.WritableMount) else "read-only volume"
        problem = layout.mount_path_problem(kind, mount.target) or host_path_problem(mount.source, mount.target)
        if problem is not None:
            raise errors.ConfigError(problem)
        target, source = posixpath.normpath(mount.target), posixpath.normpath(mount.source)
        if target in targets:
            raise errors.ConfigError(f"duplicate volume mount path '{mount.target}'")
        if source in sources:
            raise errors.ConfigError(f"gVisor isolation mounts a host directory once: '{mount.source}' is given twice")
        if not posixpath.isabs(source) or source == "/":
            raise errors.ConfigError(f"a mounted host directory must be an absolute path below '/', got '{source}'")
        targets.add(target)
        sources.add(source)
    return sorted(every, key=lambda m: posixpath.normpath(m.target).count("/"))


def _bound(mount: bwrap.ReadOnlyMount | bwrap.WritableMount) -> bool:
    """Whether ``mount`` needs a bind: a read-only one at its own path is the host root's view."""
    return isinstance(mount, bwrap.WritableMount) or posixpath.normpath(mount.source) != posixpath.normpath(
        mount.target
    )


def bind_mounts(settings: GvisorSettings) -> list[dict[str, Any]]:
    """The spec's bind mounts: each source at its own host path, read-only or writable.

    runsc makes a bind's mount point in the host's own root (the overlay is the sentry's, not
    the gofer's), so a bind goes where its source already is, and the setup script binds it on
    to its target inside gVisor (:func:`setup_script`): nothing is ever made on the host.
    """
    return [
        {
            "destination": posixpath.normpath(m.source),
            "type": "bind",
            "source": posixpath.normpath(m.source),
            "options": ["rbind", "rw" if isinstance(m, bwrap.WritableMount) else "ro"],
        }
        for m in _mounts(settings)
        if _bound(m)
    ]


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def _rebinds(settings: GvisorSettings) -> list[tuple[str, str]]:
    """Each (source, target) the setup script binds on inside: runsc binds a source at its own path."""
    pairs = ((posixpath.normpath(m.source), posixpath.normpath(m.target)) for m in _mounts(settings))
    return [(source, target) for source, target in pairs if source != target]


def _tmpfs(settings: GvisorSettings) -> list[tuple[str, str]]:
    """The sandbox's tmpfs, parents first: (mount point, options)."""
    uid, tmp = settings.uid, f"mode=1777,size={settings.tmp_size_bytes}"
    return [
        ("/home", "mode=0755,size=1m"),
        (layout.SANDBOX_HOME, f"mode=0700,uid={uid},gid={uid},size={settings.home_size_bytes}"),
        (layout.SANDBOX_TMP, tmp),
        # The overlay is memory without a limit: the world-writable /var/tmp gets a bounded tmpfs (the
        # spec's is made in the overlay on a host without one; the script's is mounted only where it is).
        ("/var/tmp", tmp),
        ("/run", "mode=0755,size=1m"),
    ]


def script_tmpfs(settings: GvisorSettings) -> tuple[str, ...]:
    """Which of :data:`SETUP_TMPFS` the setup script mounts (the rest are the spec's): one over a
    host path it reads as root (a copy's or a bind's source), after the read; then, when the
    script mounts anything, ``/run`` last (util-linux's mount records state under it)."""
    reads = [*filter(None, (settings.managed_settings_dir,)), *settings.profile_dirs]
    reads += [source for source, _ in _rebinds(settings)]
    held = [top for top in SETUP_TMPFS[:-1] if any(_under(posixpath.normpath(r), top) for r in reads)]
    return (*held, "/run") if held or _rebinds(settings) else ()


def _traversed(settings: GvisorSettings) -> list[str]:
    """The 0700 homes (:data:`_TRAVERSE_ROOTS`) holding a tool of the step, which get o+x."""
    return [r for r in _TRAVERSE_ROOTS if any(_under(path, r) for path in settings.traverse)]


def _copies(settings: GvisorSettings) -> bool:
    """Whether the setup script copies anything in (managed settings, profiles)."""
    return settings.managed_settings_dir is not None or bool(settings.profile_dirs)


def _runs_as_root(settings: GvisorSettings) -> bool:
    """Whether the spec's process is gVisor's root (the setup script has work only root can do)."""
    return settings.drops_itself or _copies(settings) or bool(_rebinds(settings)) or bool(_traversed(settings))


def _straight(settings: GvisorSettings) -> bool:
    """Whether the spec runs the command itself, not :func:`setup_script`: it drops itself and opens
    its traversed homes itself, there is no copy, bind or tmpfs for root to make, and it starts in the
    home (a tmpfs of the spec; a missing ``cwd`` runsc would make on the host). A shell and a ``chmod``
    cost 27 ms over ``runsc run true`` here; a session's open fell by about 40 ms without them."""
    simple = not _copies(settings) and not _rebinds(settings) and not script_tmpfs(settings)
    simple = simple and settings.working_dir is None
    return simple and settings.drops_itself and (settings.traverse_option is not None or not _traversed(settings))


def _process_args(settings: GvisorSettings, straight: bool) -> list[str]:
    """The spec's ``process.args``: the command ``straight`` (:func:`_straight`), else ``sh -c`` of the setup script."""
    if not straight:
        return ["sh", "-c", setup_script(settings)]
    bwrap.check_command_and_sizes(settings.command, settings.home_size_bytes, settings.tmp_size_bytes)
    opened = [word for root in _traversed(settings) for word in (str(settings.traverse_option), root)]
    return [*settings.command, *opened]


def setup_script(settings: GvisorSettings) -> str:
    """The ``sh -c`` of the spec's process: as root, its copies, binds and tmpfs, then the drop to
    the step's uid; as the step's uid (nothing to do as root), only ``cd`` and exec."""
    from ironflow.claude import command, profile  # gVisor's alone: a bubblewrap sandbox loads neither

    q = command.shell_quote
    bwrap.check_command_and_sizes(settings.command, settings.home_size_bytes, settings.tmp_size_bytes)
    uid = settings.uid
    lines: list[str] = []
    # Copies come first: the host temp dirs holding them may live under a tmpfs the script mounts next.
    if settings.managed_settings_dir is not None:
        dest = q(layout.MANAGED_SETTINGS_DIR)
        lines.append(f"mkdir -p {dest} && cp -RL {q(settings.managed_settings_dir)}/. {dest}/")
        lines.append(f"chmod -R a+rX,a-w {dest}")
    for index, profile_dir in enumerate(settings.profile_dirs):
        dest = q(profile.profile_mount_path(index))
        lines.append(f"mkdir -p {dest} && cp -RL {q(profile_dir)}/. {dest}/ && chmod -R a+rX,a-w {dest}")
    # Before the script's tmpfs: a source there (a workspace's copy) is still in sight.
    for source, target in _rebinds(settings):
        lines.append(f"mkdir -p {q(target)} && mount --bind {q(source)} {q(target)}")
    lines += [f"chmod o+x {q(root)}" for root in _traversed(settings)]
    held = script_tmpfs(settings)
    for path, options in _tmpfs(settings):
        if not any(_under(path, top) for top in held):
            continue
        mount = f"mount -t tmpfs -o {options} tmpfs {q(path)}"
        if path == layout.SANDBOX_HOME:
            lines.append(f"mkdir {q(path)}")
        lines.append(f"if [ -d /var/tmp ]; then {mount}; fi" if path == "/var/tmp" else mount)
    lines.append(f"cd {q(settings.working_dir or layout.SANDBOX_HOME)}")
    drop = "exec"
    if _runs_as_root(settings) and not settings.drops_itself:
        drop += f" setpriv --reuid {uid} --regid {uid} --clear-groups --inh-caps=-all --bounding-set=-all "
        drop += "--no-new-privs --"
    # A failed setup line is the sandbox's failure, not the step's: say so, exit 125.
    guarded = [f"{{ {line}; }} || _ifl_fail {q(line[:80])}" for line in lines]
    fail = f'_ifl_fail() {{ echo "{SETUP_FAILED}: $1" >&2; exit 125; }}'
    return "\n".join([fail, *guarded, " ".join([drop.rstrip(), *(q(a) for a in settings.command)])])


def tmpfs_mounts(settings: GvisorSettings) -> list[dict[str, Any]]:
    """The spec's tmpfs: every one the setup script does not mount itself (:func:`script_tmpfs`)."""
    held = script_tmpfs(settings)
    return [
        {"destination": path, "type": "tmpfs", "source": "tmpfs", "options": options.split(",")}
        for path, options in _tmpfs(settings)
        if not any(_under(path, top) for top in held)
    ]


def oci_spec(settings: GvisorSettings, env: Mapping[str, str]) -> dict[str, Any]:
    """The ``config.json`` of the run's bundle: the setup script as root, or as the step's uid with
    no capability when it has nothing to do as root; ``env`` for the step."""
    root, straight = _runs_as_root(settings), _straight(settings)
    capabilities = list(SETUP_CAPABILITIES) if root else []
    uid = 0 if root else settings.uid
    network = () if settings.proxy is not None else ("network",)
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": uid, "gid": uid},  # no additionalGids: no supplementary group
            "args": _process_args(settings, straight),
            "env": [f"{name}={value}" for name, value in env.items()],
            # The script's cd, or the home (a tmpfs of the spec): runsc would make a missing cwd on the host.
            "cwd": layout.SANDBOX_HOME if straight else "/",
            # A runtime started straight execs nothing as root: it needs no bounding set (and,
            # with none, loads no libc binding to drop one: sandbox_runtime/confine.py).
            "capabilities": {kind: capabilities for kind in ("effective", "permitted")}
            | {"bounding": [] if straight else capabilities, "inheritable": [], "ambient": []},
            "noNewPrivileges": True,
            "rlimits": oci_rlimits(settings.limits),
        },
        "root": {"path": "/", "readonly": False},  # under --overlay2=root:memory: writes stay in memory
        "hostname": "ironflow-sandbox",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["ro"]},
            *tmpfs_mounts(settings),
            *bind_mounts(settings),
        ],
        "linux": {
            # With the proxy, --network=host: the relay's namespace (only lo), so no namespace of its own.
            "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", *network)],
            "seccomp": seccomp.oci_user_namespace_rules(),
        },
    }


#: How much of runsc's words a kernel death keeps.
DEATH_WORDS_BYTES: Final = 4096


def kernel_death(code: int, stderr: bytes, pids: int, refused: int = 0) -> bytes:
    """The line to add to the stderr of a sandbox whose kernel died for want of host tasks (Go's
    exit 2 after its EAGAIN words, or after any panic of the kernel once the cgroup ``refused``
    a task: where the failed clone surfaces varies); empty after any other end (pure)."""
    if code != 2:
        return b""
    if _NO_HOST_TASK.search(stderr) is None and not (refused > 0 and _PANIC.search(stderr)):
        return b""
    return ("\n" + OUT_OF_TASKS.format(pids=pids) + "\n").encode()


def kernel_death_words(stderr: bytes, line: bytes) -> bytes:
    """The stderr a step keeps after such a death: runsc's first words (which say why), not the
    goroutine dump Go prints after a runtime throw (all goroutines, whatever ``--traceback``
    says: hundreds of KiB that are runsc's, not the step's), then ironflow's ``line`` (pure)."""
    if len(stderr) <= DEATH_WORDS_BYTES:
        return stderr + line
    cut = len(stderr) - DEATH_WORDS_BYTES
    return stderr[:DEATH_WORDS_BYTES] + f"\n[ironflow: {cut} bytes of gVisor's crash dump cut]".encode() + line


def container_id(bundle: str) -> str:
    """The run's container id: unique per bundle (a run's own temp dir), as it must be machine-wide,
    since runsc names the sandbox's control socket (an abstract one) after it.

    >>> container_id("/tmp/ironflow-local-x/gvisor") == container_id("/tmp/ironflow-local-y/gvisor")
    False
    """
    return "ironflow-" + hashlib.sha256(bundle.encode()).hexdigest()[:16]


def gvisor_argv(settings: GvisorSettings, bundle: str) -> list[str]:
    """The full argv: ``runsc … run`` of the spec in ``bundle`` (its state under ``bundle/state``),
    inside the relay's namespace with a proxy."""
    if not posixpath.isabs(bundle):
        raise errors.ConfigError(f"the gVisor bundle path must be absolute, got '{bundle}'")
    network = "host" if settings.proxy is not None else "none"
    runsc = [
        settings.runsc_path,
        "--rootless",
        "--ignore-cgroups",  # runsc stays in the sandbox's own cgroup (limits, kill) and leaves no runsc-* cgroup
        f"--network={network}",
        "--oci-seccomp",  # apply the spec's linux.seccomp to the step
        "--overlay2=root:memory",
        # Should gVisor's kernel die (a host limit hit), its one-goroutine panic is the sandbox's last word.
        "--panic-log=/dev/stderr",
        "--traceback=single",
        *(["--host-uds=create"] if settings.host_uds_create else []),
        "--root",
        posixpath.join(bundle, "state"),
        "run",
        "--bundle",
        bundle,
        container_id(bundle),
    ]
    if settings.proxy is None:
        return runsc
    bridge = settings.proxy
    if not posixpath.isabs(bridge.socket_path):
        raise errors.ConfigError(f"the proxy socket path must be absolute, got '{bridge.socket_path}'")
    return [
        bridge.bwrap_path,
        "--dev-bind",
        "/",
        "/",
        "--unshare-net",  # a namespace with only lo: --network=host then reaches nothing else
        "--die-with-parent",
        "--",
        *bwrap.relay_argv(bridge.python, bridge.forwarder_script, bridge.port, bridge.socket_path, bridge.egress),
        *runsc,
    ]
