"""Inside the sandbox: relay 127.0.0.1:<port> to the auth proxy's unix socket, run the step.

A second ``PORT SOCKET`` pair relays the egress proxy's port the same way (``HTTPS_PROXY``).

The sandbox has its own network namespace with only ``lo``; the auth proxy listens on a
unix socket in the parent process, bind-mounted into the sandbox. This script binds the
loopback port first, then starts the command, so the agent never races the relay; it
exits with the command's exit code and takes the relay with it, and its death takes the command
(``PR_SET_PDEATHSIG``: under gVisor the command is ``runsc run``, whose sandbox and gofer die with it,
and this relay is what bubblewrap's ``--die-with-parent`` kills when the worker dies).

Run as a standalone script (``python -I -S forwarder.py PORT SOCKET [PORT SOCKET] -- CMD…``): only
the standard library, nothing of ironflow, so it starts in a few milliseconds and
needs no package on the sandbox's path. It never reads or logs what it relays.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

__all__ = ["main"]

_CHUNK = 65536


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        # Half-close so the other direction can still finish (SSE keeps streaming).
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _drop_given_capabilities() -> None:
    """A session's runtime gets ``CAP_SYS_ADMIN`` as an ambient capability through this process
    (``bwrap --cap-add``): once it is passed on, none stays here, in this thread (capabilities are
    a thread's own). A process given none (a step, the gVisor relay) is left as it is."""
    with open("/proc/thread-self/status") as f:
        ambient = next((int(line.split()[1], 16) for line in f if line.startswith("CapAmb:")), 0)
    if ambient:
        libc = ctypes.CDLL(None, use_errno=True)
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
        if libc.prctl(47, 4, 0, 0, 0) or libc.capset(header, (ctypes.c_uint32 * 6)()):  # PR_CAP_AMBIENT_CLEAR_ALL
            raise OSError(ctypes.get_errno(), "forwarder.py: could not drop its capabilities")


def _serve(listener: socket.socket, unix_path: str) -> None:
    _drop_given_capabilities()  # before any thread of its own
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(unix_path)
        except OSError:
            client.close()
            upstream.close()
            continue
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()


def _dying_with_me() -> Callable[[], None]:
    """What the command's process runs before its exec: SIGKILL when this one dies (resolved here,
    before the fork: the child makes two system calls and nothing else)."""
    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def setup() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG, tied to this (the main) thread, which waits to the end
        if os.getppid() != parent:  # this relay died before the prctl: no signal will come
            os._exit(1)

    return setup


def main(argv: list[str]) -> int:
    """``PORT SOCKET [PORT SOCKET] -- CMD…``: relay each port, run CMD, return its exit code
    (128+signal if killed)."""
    split = argv.index("--") if "--" in argv else -1
    pairs, command = argv[:split], argv[split + 1 :]
    if split < 2 or len(pairs) % 2 or len(pairs) > 4 or not command or not all(p.isdigit() for p in pairs[::2]):
        print("usage: forwarder.py PORT SOCKET [PORT SOCKET] -- CMD [ARGS...]", file=sys.stderr)
        return 2
    for port, unix_path in zip(pairs[::2], pairs[1::2], strict=True):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(64)
        threading.Thread(target=_serve, args=(listener, unix_path), daemon=True).start()
    # The command keeps what the sandbox was given to inherit (a session runtime's listening socket);
    # this script's own sockets are non-inheritable, so they stay here.
    child = subprocess.Popen(command, close_fds=False, preexec_fn=_dying_with_me())
    _drop_given_capabilities()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
