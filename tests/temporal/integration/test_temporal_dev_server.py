"""The test kit's Temporal dev server leaves nothing in the temp directory, whoever keeps its state."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from tests.temporal.integration.conftest import temporal_missing

from ironflow.testing.temporal_server import TemporalDevServer


@pytest.mark.parametrize("keeps_state", [True, False], ids=["db_file given", "own state"])
def test_a_stopped_server_leaves_nothing_in_the_temp_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keeps_state: bool
) -> None:
    """Its log went to the temp directory itself when the caller kept the state (one
    ``temporal-<port>.log`` per run, never removed)."""
    if (reason := temporal_missing()) is not None:
        pytest.skip(reason)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    db_file = tmp_path / "kept" / "temporal.db" if keeps_state else None
    if db_file is not None:
        db_file.parent.mkdir()
    with TemporalDevServer(db_file=db_file) as server:
        assert any(temp.iterdir())  # its log (and state) live there while it runs
    assert list(temp.iterdir()) == []
    if db_file is not None:
        assert db_file.exists()  # the caller's state is the caller's
    assert server.db_file.exists() is keeps_state
