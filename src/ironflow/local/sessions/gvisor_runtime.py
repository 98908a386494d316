"""A local session's sandbox under gVisor: the ``runsc run`` argv and the bundle its runtime starts from.

A host listening socket cannot be handed to a process inside gVisor as an inherited fd, so the
runtime's socket is made inside: ``runsc --host-uds=create`` lets the sandbox create a unix
socket in a host bind mount, which the host then connects to like any other. The session's
socket directory (``<session dir>/s``, 0700, the worker's) is bind-mounted at
:data:`SOCKET_DIR`, where gVisor shows it as root's, mode 0700. The spec runs the runtime as
gVisor's root, with no setup shell unless a workspace needs one (:func:`gvisor.oci_spec`): the runtime
opens the interpreter's home for traversal (``--traverse``), binds :data:`SOCKET_PATH` first, then
empties its bounding set and drops to its own uids (``server.py --unix … --runtime-uid``); so the
step (uid 10001) can neither reach the path nor put a socket of its own in its place. (A Python
of its own once bound the socket and handed it on: a second interpreter start, about 100 ms of a
session's open under gVisor.) The runtime's real and saved uid is :data:`RUNTIME_UID`, its
commands' 10001: they cannot signal it (SIGSTOP) nor read its memory. Its code is one file in
that same directory (:data:`PACKED_PATH`, :func:`ironflow.sandbox_runtime.packed`), read once
as gVisor's root by the text of ``packed_start.py`` on its argv (:func:`runtime_command`): no
directory of code is bound in, and nothing of it is in the commands' reach (a bind and a file
per module were 21-47 ms of an open here). No network (``--network=none``): no
port of the host, the server's and the router's included, is reachable from the session. A
session with an egress policy (or an agent's proxy) runs as a one-shot step with a proxy does:
``runsc --network=host`` inside a fresh network namespace with only ``lo`` (bubblewrap's), behind
the relay of :mod:`ironflow.local.sandbox.forwarder`, so its commands reach the proxy's loopback
ports and nothing else.

Everything else is a plain gVisor sandbox of the provider (:mod:`ironflow.local.sandbox.gvisor`: the
setup script, the tmpfs, the seccomp rules, the drop to uid 10001). Only :func:`write_bundle`
touches the disk; nothing here starts a process.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Final

from ironflow import sandbox_runtime
from ironflow.claude import layout
from ironflow.local.sandbox import argv, bwrap, gvisor

__all__ = [
    "PACKED_PATH",
    "RUNTIME_ISOLATION",
    "RUNTIME_UID",
    "SOCKET_DIR",
    "SOCKET_PATH",
    "SOCKET_SUBDIR",
    "host_socket",
    "runtime_command",
    "runtime_settings",
    "spec",
    "write_bundle",
]

#: Where the session's socket directory appears inside gVisor: under its own ``/dev`` tmpfs, since
#: runsc makes the mount point of a bind on the host when it is not in a mount of the sandbox's
#: own (a new top-level path would be left on the host's ``/``).
SOCKET_DIR: Final = "/dev/ironflow-session"
#: The session directory's subdirectory that is bind-mounted there: the socket and the runtime's packed code.
SOCKET_SUBDIR: Final = "s"
_SOCKET: Final = "rt.sock"
#: The runtime's socket inside, which it binds as gVisor's root (``server.py --unix``).
SOCKET_PATH: Final = f"{SOCKET_DIR}/{_SOCKET}"
_PACKED: Final = "runtime.packed"
#: The runtime's code inside, packed (:func:`ironflow.sandbox_runtime.packed`), beside its socket.
PACKED_PATH: Final = f"{SOCKET_DIR}/{_PACKED}"
#: The runtime's real and saved uid and gid (``server.py --runtime-uid``): this gVisor release has no
#: ``unshare(CLONE_NEWPID)``, so a uid apart keeps its commands (uid 10001) from signalling it or
#: reaching its memory; its effective uid is theirs, so the files it writes are theirs.
RUNTIME_UID: Final = layout.SANDBOX_UID + 1
#: The runtime's arguments for it, added by :func:`runtime_settings`: the commands' uid (and gid) with it.
RUNTIME_ISOLATION: Final = (
    "--isolate-commands",
    "--runtime-uid",
    str(RUNTIME_UID),
    "--commands-uid",
    str(layout.SANDBOX_UID),
)


def runtime_command(python: str, *options: str) -> tuple[str, ...]:
    """The runtime's command inside: ``python`` running ``packed_start.py``'s text on its packed code,
    on the socket :data:`SOCKET_PATH`, with ``options``."""
    start = sandbox_runtime.packed_start_source()
    return (python, "-I", "-S", "-c", start, PACKED_PATH, "--unix", SOCKET_PATH, *options)


def runtime_settings(
    shape: argv.SandboxShape,
    command: tuple[str, ...],
    *,
    python: str,
    runsc_path: str,
    writable: tuple[bwrap.WritableMount, ...] = (),
    proxy: gvisor.ProxyBridge | None = None,
    tools: tuple[str, ...] = (),
) -> gvisor.GvisorSettings:
    """The gVisor sandbox of a session whose runtime is ``command`` (:func:`runtime_command`): the
    provider's sizes and profiles, the runtime started as gVisor's root (it binds its socket, then
    drops), ``writable`` (a workspace's copy) bound as a step's are, and with ``proxy`` the relay a
    step's proxy has (``tools``, the Claude Code CLI of an agent session, reachable by the commands' uid)."""
    return gvisor.GvisorSettings(
        command=(*command, *RUNTIME_ISOLATION),  # drops_itself: the runtime starts as root, and drops
        profile_dirs=tuple(p.path for p in shape.profiles),
        home_size_bytes=shape.home_size_bytes,
        tmp_size_bytes=shape.tmp_size_bytes,
        traverse=(python, *tools),
        proxy=proxy,
        runsc_path=runsc_path,
        host_uds_create=True,
        writable_mounts=writable,
        limits=shape.limits,
        drops_itself=True,
        traverse_option="--traverse",  # the runtime opens the interpreter's home itself: no setup shell
    )


def spec(settings: gvisor.GvisorSettings, env: Mapping[str, str], *, socket_source: str) -> dict[str, Any]:
    """The OCI spec: the provider's, plus the socket directory (which holds the runtime's code)."""
    doc = gvisor.oci_spec(settings, env)
    doc["mounts"].append(
        {"destination": SOCKET_DIR, "type": "bind", "source": socket_source, "options": ["rbind", "rw"]}
    )
    return doc


def host_socket(directory: str) -> str:
    """Where the host reaches the runtime of the session in ``directory``."""
    return os.path.join(directory, SOCKET_SUBDIR, _SOCKET)


def write_bundle(directory: str, doc: Mapping[str, Any], packed: bytes) -> str:
    """Make the socket directory with the runtime's ``packed`` code in it, and the bundle
    (``config.json`` 0600: it holds the session's environment; a state directory for runsc) in the
    session's ``directory``; the bundle's path."""
    os.mkdir(os.path.join(directory, SOCKET_SUBDIR), 0o700)
    fd = os.open(os.path.join(directory, SOCKET_SUBDIR, _PACKED), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(packed)
    bundle = os.path.join(directory, "gvisor")
    os.mkdir(bundle, 0o700)
    os.mkdir(os.path.join(bundle, "state"), 0o700)
    fd = os.open(os.path.join(bundle, "config.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(doc, out)
    return bundle
