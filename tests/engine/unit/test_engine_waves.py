"""The sandbox contract's pure parts: step labels (§2) and the duplicate-name refusal (§3.4)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ironflow import labels, waves
from ironflow.steps import AgentConfig, StepScope

RUN = "01a0e906-1f85-7000-8000-000000000001"
ROOT = "01a0e906-1f85-7000-8000-000000000000"


def test_step_labels_keep_uuid_run_ids_and_sanitise_the_step() -> None:
    scoped = AgentConfig("go").scoped(RUN, "fix bug/42", root_run_id=ROOT)
    assert scoped.scope == StepScope(RUN, "fix bug/42", ROOT)
    assert scoped.scope.labels == {
        labels.LABEL_RUN_ID: RUN,
        labels.LABEL_ROOT_RUN_ID: ROOT,
        labels.LABEL_STEP: "fix-bug-42-b8a85051",
    }


def test_scoping_leaves_the_callers_labels_alone() -> None:
    config = AgentConfig("go").egress_profile("github")
    scoped = config.scoped(RUN, "plan", root_run_id=RUN)
    assert scoped.pod_labels == config.pod_labels  # run identity travels as the scope, not as labels


def test_the_duplicate_message_is_the_references_word_for_word() -> None:
    assert waves.wave_duplicate_message("review") == (
        'parallel wave has two steps named "review"; each step of a wave needs its own name'
    )


def test_the_duplicate_message_quotes_like_rust_debug() -> None:
    assert waves.wave_duplicate_message('a "b"') == (
        'parallel wave has two steps named "a \\"b\\""; each step of a wave needs its own name'
    )


def test_the_first_repeated_raw_name_is_reported() -> None:
    assert waves.duplicate_name(["a", "b", "c", "b", "a"]) == "b"
    assert waves.duplicate_name(["a", "b"]) is None
    assert waves.duplicate_name([]) is None


def test_names_that_sanitise_alike_are_not_duplicates() -> None:
    # Raw names are compared; the sanitiser's hash keeps their labels apart.
    assert waves.duplicate_name(["fix bug", "fix/bug"]) is None


@settings(deadline=None)  # a shared 2-core machine: timing is not the property
@given(st.lists(st.text(max_size=5), max_size=8))
def test_a_duplicate_is_found_exactly_when_names_repeat(names: list[str]) -> None:
    found = waves.duplicate_name(names)
    assert (found is not None) == (len(set(names)) != len(names))
    if found is not None:
        assert names.count(found) >= 2
