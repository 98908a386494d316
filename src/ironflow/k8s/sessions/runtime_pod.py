"""The session runtime as a session pod's main process, and how its token gets there (pure).

A session pod's container runs :mod:`ironflow.sandbox_runtime.server` from the image
(:data:`IMAGE_RUNTIME_DIR`, where the runner image puts it) on :data:`PORT`, with the kubelet's
readiness probe on ``GET /``; an image without it idles as before, and its session is reached by
exec (:mod:`ironflow.k8s.sessions.bridge`). The runtime starts with no token: each process that
holds the session writes one through one ``pods/exec`` of :func:`delivery_command` into the
runtime's FIFO (:mod:`ironflow.sandbox_runtime.delivery`), its stdin the line of
:func:`token_line`. So no token is ever in the pod spec, its env, an event or any other API object.

The delivery says what it found on its stdout (:func:`delivered`): ``delivered``, or ``absent``
when the pod runs no runtime (an image without it, kwok, where every exec runs on the test host).
Everything here is a value of its inputs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from ironflow.claude import layout

__all__ = [
    "IMAGE_RUNTIME_DIR",
    "PORT",
    "PORT_NAME",
    "TOKEN_FIFO",
    "address_of",
    "delivered",
    "delivery_command",
    "main_command",
    "readiness_probe",
    "token_line",
]

#: Where the runner image keeps the runtime's files (docker/claude-runner/Dockerfile).
IMAGE_RUNTIME_DIR: Final = "/opt/ironflow/runtime"
#: The runtime's port: the legacy runtime API's (agent-sandbox's SDK and router use 8888).
PORT: Final = 8888
PORT_NAME: Final = "runtime"
#: The FIFO the runtime takes its tokens by, in a 0700 directory of the pod's emptyDir HOME.
TOKEN_FIFO: Final = f"{layout.SANDBOX_HOME}/.ironflow/runtime-tokens"
#: How long a delivery waits for the runtime's FIFO in an image that has the runtime (its start).
_FIFO_WAIT_S: Final = 20
_DELIVERED: Final = "ironflow-delivery: delivered"
_ABSENT: Final = "ironflow-delivery: absent"
#: Reads the line (its size in argv: exec's stdin has no EOF), then writes it whole into the FIFO,
#: which a runtime holds open; absent at once when the image has no runtime.
_DELIVER: Final = (
    "import os,sys,time\n"
    "fifo,server,size,wait=sys.argv[1],sys.argv[2],int(sys.argv[3]),float(sys.argv[4])\n"
    "line=sys.stdin.buffer.read(size)\n"
    "end=time.monotonic()+wait\n"
    "while True:\n"
    " try:\n"
    "  fd=os.open(fifo,os.O_WRONLY|os.O_NONBLOCK);break\n"
    " except OSError:\n"
    "  if not os.path.exists(server) or time.monotonic()>end:\n"
    f"   print({_ABSENT!r});sys.exit(0)\n"
    "  time.sleep(0.02)\n"
    "os.set_blocking(fd,True);os.write(fd,line);os.close(fd)\n"
    f"print({_DELIVERED!r})\n"
)
#: The container's process when the image has no runtime: waits, ends at once on SIGTERM.
_IDLE: Final = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"


def _server() -> str:
    return f"{IMAGE_RUNTIME_DIR}/server.py"


def main_command(*, python: str = "python3") -> list[str]:
    """The container's command: the runtime when the image has it (``exec``: it is the main
    process), else an idle shell.

    >>> main_command()[-1].startswith("if [ -f /opt/ironflow/runtime/server.py ]")
    True
    """
    runtime = f"exec {python} -I -S {_server()} --port {PORT} --token-fifo {TOKEN_FIFO}"
    return ["/bin/sh", "-c", f"if [ -f {_server()} ] && command -v {python} >/dev/null; then {runtime}; fi; {_IDLE}"]


def readiness_probe() -> dict[str, Any]:
    """``GET /`` with no token: the runtime's one answer to anyone (200, saying nothing)."""
    return {"httpGet": {"path": "/", "port": PORT_NAME}, "periodSeconds": 2, "timeoutSeconds": 2}


def address_of(pod: Mapping[str, Any], container: str) -> str | None:
    """The runtime's address (``podIP:port``) when ``container`` declares the runtime's port, else None."""
    spec = pod.get("spec") or {}
    for declared in spec.get("containers") or ():
        if declared.get("name") != container:
            continue
        ports = declared.get("ports") or ()
        if any(p.get("name") == PORT_NAME and p.get("containerPort") == PORT for p in ports):
            ip = (pod.get("status") or {}).get("podIP")
            if ip:
                return f"[{ip}]:{PORT}" if ":" in str(ip) else f"{ip}:{PORT}"
    return None


def token_line(token: str, *, workspace: str | None, idle_timeout: float | None, max_upload_bytes: int) -> bytes:
    """The line a delivery writes: the token; the first line also sets the session's workspace,
    its upload limit and its idle timeout.

    >>> token_line("t", workspace=None, idle_timeout=None, max_upload_bytes=5)
    b'{"token": "t", "max_upload_bytes": 5}\\n'
    """
    doc: dict[str, Any] = {"token": token, "max_upload_bytes": int(max_upload_bytes)}
    if workspace is not None:
        doc["workspace"] = workspace
    if idle_timeout:
        doc["idle_timeout"] = idle_timeout
    return json.dumps(doc).encode() + b"\n"


def delivery_command(size: int, *, python: str = "python3") -> tuple[str, ...]:
    """The exec argv that writes ``size`` bytes of its stdin into the runtime's FIFO."""
    return (python, "-I", "-S", "-c", _DELIVER, TOKEN_FIFO, _server(), str(int(size)), str(_FIFO_WAIT_S))


def delivered(stdout: bytes) -> bool | None:
    """True: the runtime took the line; False: the pod runs none; None: the exec said neither."""
    said = stdout.decode(errors="replace").strip().splitlines()
    last = said[-1] if said else ""
    return True if last == _DELIVERED else False if last == _ABSENT else None
