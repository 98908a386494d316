"""The marks of a test that runs the local sandbox for real (bubblewrap, gVisor and the pinned Claude
Code CLI): selected by ``-m bwrap`` / ``-m gvisor`` / ``-m claude_cli``, and skipped with the reason
when one is missing (``scripts/install`` puts bubblewrap and the CLI in place; CI installs them)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import pytest

from ironflow import errors
from ironflow.claude import cli

__all__ = [
    "ALL_ISOLATIONS",
    "ALL_WORKSPACE_ISOLATIONS",
    "DOCKER",
    "ISOLATIONS",
    "LOCAL_SANDBOX",
    "PODMAN",
    "PODMAN_GAPS",
    "SESSION_ISOLATIONS",
    "SESSION_PODMAN",
    "WORKSPACE_ISOLATIONS",
    "has_claude_cli",
    "local_sandbox",
    "on_podman",
]


def has_claude_cli() -> bool:
    try:
        cli.find_claude_cli()
    except errors.ConfigError:
        return False
    return True


#: The local sandbox with the real Claude Code CLI: a module's ``pytestmark`` (``[*LOCAL_SANDBOX, …]``).
LOCAL_SANDBOX = [
    pytest.mark.bwrap,
    pytest.mark.claude_cli,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(not has_claude_cli(), reason="Claude Code CLI not installed (run scripts/install)"),
]


def local_sandbox(test: Callable[..., Any]) -> Callable[..., Any]:
    """:data:`LOCAL_SANDBOX` on one test."""
    for mark in LOCAL_SANDBOX:
        test = mark(test)
    return test


#: Both runtimes, for ``pytest.mark.parametrize("isolation", ISOLATIONS)``: gVisor's case is marked
#: ``gvisor`` and skipped with the reason when ``runsc`` is missing.
ISOLATIONS = [
    pytest.param(
        "bwrap", id="bwrap", marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
    ),
    pytest.param(
        "gvisor",
        id="gvisor",
        marks=[
            pytest.mark.gvisor,
            pytest.mark.skipif(shutil.which("runsc") is None, reason="runsc (gVisor) not installed"),
        ],
    ),
]

#: A Docker daemon (Debian's dockerd, started by the suite: :mod:`tests.fakes.docker_daemon`), running
#: the runner image: marked ``docker``, skipped with the reason when dockerd or the image is missing.
DOCKER = pytest.param("docker", id="docker", marks=pytest.mark.docker)
#: Isolation ``docker`` on Podman's Docker API (Debian's podman, :mod:`tests.fakes.podman_daemon`): marked
#: ``docker`` and ``podman``, skipped with the reason when podman or the image is missing.
PODMAN = pytest.param("docker", id="podman", marks=[pytest.mark.docker, pytest.mark.podman])
#: Every runtime, for the hostile-step tests each one must pass (their commands run in the runner image too).
ALL_ISOLATIONS = [*ISOLATIONS, DOCKER, PODMAN]
#: Docker sessions need a root worker: their socket's directory is handed to the container's uid and back.
_AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="Docker sessions need a worker running as root")
#: Every runtime a local session runs on, each marked for ``-m`` and skipped with the reason.
SESSION_ISOLATIONS = [
    pytest.param("bwrap", id="bwrap", marks=[pytest.mark.bwrap, *ISOLATIONS[0].marks]),
    ISOLATIONS[1],
    pytest.param("docker", id="docker", marks=[*DOCKER.marks, _AS_ROOT]),
]
#: Docker sessions on Podman's Docker API, as :data:`SESSION_ISOLATIONS`' Docker case.
SESSION_PODMAN = pytest.param("docker", id="podman", marks=[*PODMAN.marks, _AS_ROOT])
#: Where Podman 4.3 (Debian 12's) falls short of Docker's posture (docs/local-sandbox.md): a test
#: whose ``podman`` case shows the gap says so with ``pytest.xfail(PODMAN_GAPS[...])``.
PODMAN_GAPS = {
    "userns": "Podman's default seccomp profile lets a step create a user namespace (Docker's refuses); its "
    "Docker API takes a profile only as a path on its host, the docker client sends the content",
    "oom": "Podman 4.3 reports no OOMKilled for a container killed at its memory limit here (its conmon writes the "
    "oom marker into its working directory, not where Podman reads it)",
}


def on_podman(request: pytest.FixtureRequest) -> bool:
    """Whether the test runs on Podman's Docker API (its ``podman`` case)."""
    return request.node.get_closest_marker("podman") is not None


#: Both runtimes for a test that gives the step a workspace or a writable mount: under gVisor that
#: needs a root worker (rootless runsc shows a non-root worker's files as root's), else skipped.
WORKSPACE_ISOLATIONS = [
    ISOLATIONS[0],
    pytest.param(
        "gvisor",
        id="gvisor",
        marks=[
            *ISOLATIONS[1].marks,
            pytest.mark.skipif(os.geteuid() != 0, reason="a gVisor workspace needs a worker running as root"),
        ],
    ),
]
#: Every runtime for a test that gives the step a workspace: Docker's, too, needs a root worker.
ALL_WORKSPACE_ISOLATIONS = [
    *WORKSPACE_ISOLATIONS,
    pytest.param(
        "docker",
        id="docker",
        marks=[
            pytest.mark.docker,
            pytest.mark.skipif(os.geteuid() != 0, reason="a Docker workspace needs a worker running as root"),
        ],
    ),
]
