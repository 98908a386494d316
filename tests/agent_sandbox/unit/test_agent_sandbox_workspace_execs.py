"""The execs of a git workspace in a warm pod, as values: the token only ever on stdin, the
starting commit read back from the clone's last line, the step wrapped as a pod's is."""

from __future__ import annotations

import pytest

from ironflow import errors
from ironflow.agent_sandbox import workspace_execs
from ironflow.k8s import workspace_pods
from ironflow.workspaces import Workspace

SPEC = Workspace("https://git.example.com/org/repo.git", ref="main")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_the_clone_reads_its_token_from_stdin_and_no_argv_holds_one() -> None:
    argv = workspace_execs.clone_exec("http://proxy.ironflow:8080", SPEC, 69)
    script = argv[-1]
    assert argv[:2] == ("sh", "-c")
    assert "ironflow_token=$(head -c 69)" in script
    assert "export GIT_CONFIG_VALUE_0='Authorization: Bearer '\"$ironflow_token\"" in script
    assert "ifap_" not in script
    assert "ironflow-token-mark" not in script
    assert "/r/git.example.com/org/repo.git" in script  # through the relay, never the host itself
    assert script.rstrip().endswith("\"$(cat '/home/claude/.ironflow/workspace-base'/commit)\"")


def test_the_starting_commit_is_the_clones_last_line_and_nothing_else_counts() -> None:
    assert workspace_execs.parse_commit(f"ironflow_commit={COMMIT}\n".encode()) == COMMIT
    with pytest.raises(errors.WorkspaceUnsafe, match="no starting commit"):
        workspace_execs.parse_commit(f"ironflow_commit={COMMIT}\nmore\n".encode())
    with pytest.raises(errors.WorkspaceUnsafe, match="no starting commit"):
        workspace_execs.parse_commit(b"ironflow_commit=HEAD\n")


def test_the_step_is_the_pod_backends_wrapper_with_the_warm_pods_reap_and_a_verified_base() -> None:
    wrapped = workspace_execs.step_command("make fmt", SPEC, COMMIT)
    expected = workspace_pods.wrapped_command(
        "cd '/home/claude/workspace' && make fmt", SPEC, workspace=workspace_execs.WORKSPACE,
        base=workspace_execs.BASE, commit=COMMIT, reap=workspace_execs.REAP,
    )  # fmt: skip
    assert wrapped == expected
    assert f"ironflow_base={COMMIT}" in wrapped
    assert "fsck --full" in wrapped
    assert workspace_pods.PID1_REAP not in wrapped


def test_a_starting_commit_that_is_no_commit_id_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="invalid starting commit"):
        workspace_execs.step_command("true", SPEC, "HEAD; rm -rf /")
