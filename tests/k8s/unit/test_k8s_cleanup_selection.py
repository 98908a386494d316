"""Cleanup selections (pure): the exact selectors of a run release and a step retry (§3)."""

from __future__ import annotations

from ironflow.k8s.cleanup import run_selection, step_selection

RUN = "01a0e906-1f85-7000-8000-000000000001"
MANAGED = "app.kubernetes.io/managed-by=ironflow"
RUNNER = MANAGED + ",app.kubernetes.io/component=claude-runner"
PROMPT = MANAGED + ",app.kubernetes.io/component=prompt-data"


def test_run_selection_covers_run_and_root_for_every_component() -> None:
    """Pods and Jobs of any component, of the run and of runs whose root it is."""
    sel = run_selection(RUN)
    expected = (f"{MANAGED},ironflow.io/run-id={RUN}", f"{MANAGED},ironflow.io/root-run-id={RUN}")
    assert sel.pods == expected
    assert sel.jobs == expected
    assert sel.configmaps == (f"{PROMPT},ironflow.io/run-id={RUN}", f"{PROMPT},ironflow.io/root-run-id={RUN}")
    assert sel.what == f"run {RUN}"


def test_run_selection_sanitizes_the_id_but_names_it_raw() -> None:
    """A non-label run id is selected by its sanitised form; messages keep the raw id."""
    sel = run_selection("run 1/x")
    assert "ironflow.io/run-id=run-1-x-" in sel.pods[0]
    assert " " not in sel.pods[0]
    assert sel.what == "run run 1/x"


def test_step_selection_targets_runner_pods_and_prompts_only() -> None:
    """A retry deletes the agent pod and prompt of that step: never Jobs, never other steps."""
    sel = step_selection(RUN, "review-7f3a")
    assert sel.pods == (f"{RUNNER},ironflow.io/run-id={RUN},ironflow.io/step=review-7f3a",)
    assert sel.jobs == ()
    assert sel.configmaps == (f"{PROMPT},ironflow.io/run-id={RUN},ironflow.io/step=review-7f3a",)
    assert sel.what == f"the previous attempt of step review-7f3a of run {RUN}"


def test_step_selection_uses_label_values_as_written() -> None:
    """No re-sanitising: the values are taken exactly as they sit on the pod."""
    sel = step_selection("run-a", "fix-bug-42-b8a85051")
    assert sel.pods[0].endswith("ironflow.io/run-id=run-a,ironflow.io/step=fix-bug-42-b8a85051")
