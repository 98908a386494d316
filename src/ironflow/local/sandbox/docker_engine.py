"""The Docker daemon a provider's sandboxes run on, reached by the ``docker`` client (I/O).

Why the client and not the Engine API: ``docker run`` attached is already what the local
sandbox runs (a process whose stdin, stdout, stderr and exit code are the step's), so the
launcher, its output bounds and its kill paths stay the bubblewrap ones; the client also
resolves the user's contexts (Docker Desktop, a Podman socket, ``DOCKER_HOST``) as they expect.

Checked once, when the provider is built: a daemon answers and holds the image (no registry is
ever asked). After each sandbox, its container is read (was it killed at its memory limit?) and
removed, on every path; a killed client leaves its container running, so the removal is what
ends the step. Only the worker's own Docker variables reach the client, never a step's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Final

from ironflow import errors
from ironflow.cluster import workloads
from ironflow.local.sandbox import docker, launch

__all__ = ["CLIENT_ENV", "DEFAULT_IMAGE", "DockerEngine", "client_env"]

#: The image a step runs in unless the provider names another: the runner image ``scripts/images build`` makes.
DEFAULT_IMAGE: Final = workloads.DEFAULT_RUNNER_IMAGE

#: The worker's variables that say which daemon the client talks to and how (its contexts, TLS).
CLIENT_ENV: Final = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY", "HOME")
_CHECK_TIMEOUT_S: Final = 20.0
_REMOVE_TIMEOUT_S: Final = 60.0


def client_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The client's whole environment: the fixed runtime one and the worker's Docker variables (pure)."""
    return {**launch.RUNTIME_ENV, **{name: environ[name] for name in CLIENT_ENV if environ.get(name)}}


class DockerEngine:
    """One daemon, as the ``docker`` client at ``docker_path`` reaches it with ``env``."""

    def __init__(self, docker_path: str, env: Mapping[str, str]) -> None:
        self.docker_path = docker_path
        self._env = dict(env)
        #: Whether the daemon is Podman's Docker API (known once :meth:`check` ran).
        self.podman = False

    @property
    def env(self) -> Mapping[str, str]:
        """The client's whole environment."""
        return self._env

    @classmethod
    def from_environment(cls) -> DockerEngine:
        """The daemon this worker's environment names (``DOCKER_HOST``, a context, or the default socket).

        Raises:
            ConfigError: no ``docker`` client on PATH.
        """
        found = shutil.which("docker")
        if found is None:
            raise errors.ConfigError(
                "isolation 'docker' needs the docker client: install it (apt-get install -y docker.io, or Docker "
                "Desktop), or use isolation 'bwrap'"
            )
        return cls(found, client_env(os.environ))

    def where(self) -> str:
        """The daemon's address as the user named it, for messages."""
        if self._env.get("DOCKER_HOST"):
            return self._env["DOCKER_HOST"]
        if self._env.get("DOCKER_CONTEXT"):
            return f"context {self._env['DOCKER_CONTEXT']}"
        return "the default socket (unix:///var/run/docker.sock, or the current context)"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.docker_path, *args],
                env=self._env,
                capture_output=True,
                text=True,
                timeout=_CHECK_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess([], 1, "", f"no answer in {_CHECK_TIMEOUT_S:g}s")

    def check(self, image: str) -> str:
        """The id of ``image`` in the daemon, checked before any step runs.

        Raises:
            ConfigError: no daemon answers, or it does not hold ``image`` (it is never pulled).
        """
        version = self._run("version", "--format", "{{.Server.Version}} {{range .Server.Components}}{{.Name}};{{end}}")
        if version.returncode != 0 or not version.stdout.strip():
            raise errors.ConfigError(
                f"no Docker daemon answers at {self.where()}: start Docker (or Podman's API socket) "
                "or set DOCKER_HOST, or use isolation 'bwrap'"
            )
        self.podman = "Podman Engine;" in version.stdout
        found = self._run("image", "inspect", "--format", "{{.Id}}", image)
        if found.returncode != 0 or not found.stdout.strip():
            raise errors.ConfigError(
                f"image '{image}' is not in the Docker daemon at {self.where()} (no registry is asked): load it "
                'first (docker load -i "$(scripts/images path runner)") or name another with docker_image'
            )
        return found.stdout.strip()

    def container_in(self, argv: list[str]) -> str | None:
        """The container a sandbox's argv runs in (None: not a ``docker run`` of this module's)."""
        return docker.container_in(argv)

    async def _output(self, *args: str, limit_s: float) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            self.docker_path,
            *args,
            env=self._env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            async with asyncio.timeout(limit_s):
                out, _ = await proc.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await launch.reap(proc)  # bounded: its unread output, or a child holding the pipe, never holds it up
            return -1, ""
        return proc.returncode or 0, out.decode(errors="replace")

    async def memory_killed(self, name: str) -> bool:
        """Whether the kernel killed a process of container ``name`` at its memory limit."""
        code, out = await self._output("inspect", "--format", "{{.State.OOMKilled}}", name, limit_s=_CHECK_TIMEOUT_S)
        return code == 0 and out.strip() == "true"

    async def remove(self, name: str) -> None:
        """Kill and remove container ``name`` (nothing when it never came to be)."""
        await self._output("rm", "--force", name, limit_s=_REMOVE_TIMEOUT_S)
