"""A paused Kubernetes session's record (pure): its archive's name, what it was opened with and
how it opens again, and which sessions a pause refuses, in one line."""

from __future__ import annotations

import doctest

import pytest

from ironflow import errors
from ironflow.k8s.sessions import pause_records
from ironflow.k8s.sessions.pause_records import PausedSession
from ironflow.sandbox_runtime import SESSION_ENV
from ironflow.sessions.values import SessionInfo, SessionNotFound

SID = "sbx-0123456789abcdef"


def _paused(expires_at: float = 1_000.0) -> PausedSession:
    info = SessionInfo(SID, "k8s", "pod", 10.0, expires_at, {"team": "a"}, "run-9", paused=True)
    return PausedSession(info, {"B": "2"}, "agents", "https://127.0.0.1:6443")


def test_the_docstring_examples_hold() -> None:
    assert doctest.testmod(pause_records).failed == 0


def test_a_record_travels_as_json_and_opens_again_to_the_same_expiry() -> None:
    record = _paused()
    assert PausedSession.from_json(record.to_json()) == record
    options = record.options(now=400.0)
    assert (options.ttl, dict(options.labels), options.run_id, dict(options.env)) == (600.0, {"team": "a"}, "run-9",
                                                                                      {"B": "2"})  # fmt: skip
    assert (options.workspace, options.egress, options.idle_suspend) == (None, None, None)


def test_a_record_whose_ttl_passed_while_paused_opens_nothing() -> None:
    with pytest.raises(SessionNotFound, match=f"'{SID}' has ended: its TTL passed while it was paused"):
        _paused(expires_at=100.0).options(now=100.0)


@pytest.mark.parametrize("doc", [None, [], {"info": {}}, {"info": {"id": "x"}, "env": {}}, {"env": {}}])
def test_a_broken_record_is_one_config_error(doc: object) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        PausedSession.from_json(doc)
    assert "\n" not in str(caught.value)


def test_the_archive_name_is_a_label_value_and_names_its_session_back() -> None:
    name = pause_records.archive_name(SID)
    assert (name, pause_records.session_of(name)) == (f"paused-{SID}", SID)
    assert pause_records.session_of(None) is None
    assert pause_records.session_of("kept") is None


def test_what_an_archive_of_the_workspace_cannot_bring_back_is_refused_in_one_line() -> None:
    assert pause_records.refusal(workspace=False, env={"B": "2"}) is None
    clone = pause_records.refusal(workspace=True, env={})
    assert clone is not None
    assert clone.startswith("a Kubernetes session with a git workspace cannot take a pause: its clone's base")
    egress = pause_records.refusal(workspace=False, env={SESSION_ENV: "/x"}, idle_suspend=True)
    assert egress is not None
    assert egress.startswith("a Kubernetes session opened with egress cannot take idle suspend")
    assert "\n" not in clone + egress
