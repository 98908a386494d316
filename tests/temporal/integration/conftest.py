"""A real Temporal dev server per test (``temporal server start-dev``), skipped with the reason
when the pinned CLI is not built (``scripts/temporal-cli build``; CI builds it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ironflow.testing.temporal_server import TemporalDevServer, TemporalNotAvailable, find_temporal_cli


def temporal_missing() -> str | None:
    """Why the Temporal tests cannot run here, or None."""
    try:
        find_temporal_cli()
    except TemporalNotAvailable as exc:
        return str(exc)
    return None


@pytest.fixture
def temporal_server() -> Iterator[TemporalDevServer]:
    """A fresh dev server on free loopback ports; its process group is gone after the test."""
    reason = temporal_missing()
    if reason is not None:
        pytest.skip(reason)
    with TemporalDevServer() as server:
        yield server
