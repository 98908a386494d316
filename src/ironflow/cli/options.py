"""What several commands share: the ``--backend`` choices, the one-line bad-input exit, and
``--provider FILE`` for ``--backend k8s`` (``ironflow agent``, ``exec``, ``run``, ``worker``) and
``--backend agent-sandbox`` (``agent``, ``run``, ``worker``).

One place so every command refuses the same input with the same words: a missing or
unreadable provider file, an unknown setting, a wrong type — all exit 2 with one
``error: …`` line on stderr that names the setting (the messages are
:meth:`K8sEphemeralProvider.from_file`'s).
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn

import typer

from ironflow import errors
from ironflow.k8s.provider import K8sEphemeralProvider

if TYPE_CHECKING:
    from ironflow.agent_sandbox.provider import AgentSandboxProvider

__all__ = ["EXIT_BAD_INPUT", "Backend", "agent_sandbox_provider", "fail", "k8s_provider"]

EXIT_BAD_INPUT: Final = 2


class Backend(StrEnum):
    """Where a step runs: ``--backend`` of ``agent``, ``exec`` and ``run`` (``exec``: local or k8s only)."""

    LOCAL = "local"
    K8S = "k8s"
    AGENT_SANDBOX = "agent-sandbox"


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code`` (bad input by default).

    Trailing whitespace goes (a failed agent's stderr ends with a newline): the line ends once.
    """
    print(f"error: {message.rstrip()}", file=sys.stderr)
    raise typer.Exit(code)


def k8s_provider(path: Path | None) -> K8sEphemeralProvider:
    """The provider ``--provider FILE`` names, or exit 2 naming what is wrong with it."""
    if path is None:
        fail("--backend k8s needs --provider provider.yaml (see docs/k8s-provider.md)")
    try:
        return K8sEphemeralProvider.from_file(path)
    except errors.ConfigError as exc:
        fail(exc.message)


def agent_sandbox_provider(path: Path | None) -> AgentSandboxProvider:
    """The agent-sandbox provider ``--provider FILE`` names, or exit 2 naming what is wrong."""
    from ironflow.agent_sandbox.provider import AgentSandboxProvider  # loads only for this backend

    if path is None:
        fail("--backend agent-sandbox needs --provider provider.yaml (see docs/agent-sandbox.md)")
    try:
        return AgentSandboxProvider.from_file(path)
    except errors.ConfigError as exc:
        fail(exc.message)
