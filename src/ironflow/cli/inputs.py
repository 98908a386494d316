"""Checks of command-line values that the option types cannot express; each bad value
exits 2 with one line naming the option and the fix (pure but for :func:`~ironflow.cli.exits.fail`)."""

from __future__ import annotations

import math
from enum import StrEnum

from ironflow import errors, labels
from ironflow.cli import exits

__all__ = ["Backend", "Isolation", "command_env", "dns_label", "parse_pairs", "port", "seconds"]


class Backend(StrEnum):
    """Where a step or session runs: ``--backend`` of ``agent``, ``exec``, ``run`` and the
    ``sandbox`` session commands (``exec``: local or k8s only). Here, not beside the providers,
    so the light session client types its option the same way without loading them."""

    LOCAL = "local"
    K8S = "k8s"
    AGENT_SANDBOX = "agent-sandbox"


class Isolation(StrEnum):
    """``--isolation`` of the local backend: bubblewrap, gVisor (runsc) or a Docker (or Podman) daemon."""

    BWRAP = "bwrap"
    GVISOR = "gvisor"
    DOCKER = "docker"


def dns_label(value: str, what: str = "namespace") -> str:
    """``value`` if it is a valid namespace-style name, else exit 2 naming ``what``."""
    if not labels.is_dns_label(value):
        exits.fail(f"invalid {what} '{value}': use 1-63 lowercase letters, digits and '-'")
    return value


def seconds(value: float, option: str) -> float:
    """``value`` if it is a finite, positive number of seconds, else exit 2 naming ``option``."""
    if not math.isfinite(value) or value <= 0:
        exits.fail(f"invalid {option} {value:g}: use a finite number of seconds greater than zero")
    return value


def port(value: str, option: str) -> int:
    """``value`` as a TCP port, 0 (any free one) to 65535, else exit 2 naming ``option``."""
    if not (value.isascii() and value.isdigit() and int(value) <= 65535):
        exits.fail(f"invalid {option} {value!r}: use a port number from 0 (any free port) to 65535")
    return int(value)


def parse_pairs(values: list[str] | None, option: str) -> dict[str, str]:
    """``K=V`` strings as a dict; a value without ``=`` exits 2 naming ``option``."""
    pairs: dict[str, str] = {}
    for value in values or ():
        key, sep, rest = value.partition("=")
        if not sep or not key:
            exits.fail(f"invalid {option} '{errors.truncate(value, 60)}': use KEY=VALUE")
        pairs[key] = rest
    return pairs


def command_env(values: list[str] | None) -> dict[str, str]:
    """``--env`` pairs under the rule a session's own env keeps (no loader variable); exits 2 on a bad one."""
    pairs = parse_pairs(values, "--env")
    if pairs:
        from ironflow.local.sandbox import environment  # its rules, only when a variable is given

        for name, value in pairs.items():
            if problem := environment.env_problem(name, value):
                exits.fail(problem)
    return pairs
