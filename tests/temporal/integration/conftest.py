"""A real Temporal dev server per test (``temporal server start-dev``), skipped with the reason
when the pinned CLI is not built (``scripts/temporal-cli build``; CI builds it)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from ironflow import errors
from ironflow.claude import cli
from ironflow.testing.temporal import TemporalDevServer, TemporalNotAvailable, find_temporal_cli


def _claude() -> str | None:
    try:
        return cli.find_claude_cli()
    except errors.ConfigError:
        return None


def temporal_missing() -> str | None:
    """Why the Temporal tests cannot run here, or None."""
    try:
        find_temporal_cli()
    except TemporalNotAvailable as exc:
        return str(exc)
    return None


#: The local sandbox with the real Claude Code CLI, as the engine's tests run it.
LOCAL_SANDBOX = [
    pytest.mark.bwrap,
    pytest.mark.claude_cli,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(_claude() is None, reason="Claude Code CLI not installed (run scripts/install)"),
]


@pytest.fixture
def temporal_server() -> Iterator[TemporalDevServer]:
    """A fresh dev server on free loopback ports; its process group is gone after the test."""
    reason = temporal_missing()
    if reason is not None:
        pytest.skip(reason)
    with TemporalDevServer() as server:
        yield server
