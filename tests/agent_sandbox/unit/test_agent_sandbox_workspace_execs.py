"""The execs of a git workspace in a warm pod, as values: the token only ever on stdin, the
starting commit read back from the clone's last line, the step wrapped as a pod's is."""

from __future__ import annotations

import pytest

from ironflow import errors
from ironflow.agent_sandbox import workspace_execs
from ironflow.k8s.workspaces import init_pods
from ironflow.workspaces import Workspace

SPEC = Workspace("https://git.example.com/org/repo.git", ref="main")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def token_from_stdin_only(argv: tuple[str, ...], size: int) -> str:
    """The script of an exec that reads ``size`` bytes of stdin as its token into git's environment
    and holds none itself."""
    script = argv[-1]
    assert argv[:2] == ("sh", "-c")
    assert f"ironflow_token=$(head -c {size})" in script
    assert "export GIT_CONFIG_VALUE_0='Authorization: Bearer '\"$ironflow_token\"" in script
    assert "ifap_" not in script
    assert "ironflow-token-mark" not in script
    return script


def test_the_clone_reads_its_token_from_stdin_and_no_argv_holds_one() -> None:
    argv = workspace_execs.clone_exec("http://proxy.ironflow:8080", SPEC, 69)
    script = token_from_stdin_only(argv, 69)
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
    expected = init_pods.wrapped_command(
        "cd '/home/claude/workspace' && make fmt", SPEC, workspace=workspace_execs.WORKSPACE,
        base=workspace_execs.BASE, commit=COMMIT, reap=workspace_execs.REAP,
    )  # fmt: skip
    assert wrapped == expected
    assert f"ironflow_base={COMMIT}" in wrapped
    assert "fsck --full" in wrapped
    assert init_pods.PID1_REAP not in wrapped


def test_a_starting_commit_that_is_no_commit_id_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="invalid starting commit"):
        workspace_execs.step_command("true", SPEC, "HEAD; rm -rf /")


PUSH = Workspace("https://git.example.com/org/repo.git", ref="main", push_branch="ironflow/fix-add")


def test_the_push_reads_its_own_token_from_stdin_and_commits_the_patch_onto_a_fresh_clone() -> None:
    argv = workspace_execs.push_exec("http://proxy.ironflow:8080", PUSH, 69, message="ironflow fix: add() adds")
    script = token_from_stdin_only(argv, 69)
    assert "export GIT_COMMITTER_NAME='ironflow'" in script
    assert "export IRONFLOW_PUSH_MESSAGE='ironflow fix: add() adds'" in script
    # The clone is afresh, beside the step's workspace (whose .git the step could have rigged), at the ref.
    fresh = workspace_execs.PUSH_CLONE
    assert workspace_execs.WORKSPACE not in script
    relay = "http://proxy.ironflow:8080/r/git.example.com/org/repo.git"
    assert f"git clone --quiet --branch main -- {relay} {fresh}" in script
    assert f"apply --cached --binary {workspace_execs.PUSH_PATCH}" in script
    assert "-c core.hooksPath=/dev/null commit --quiet --no-verify" in script
    assert "--force-with-lease=refs/heads/ironflow/fix-add: -- " in script
    assert script.index("git clone") < script.index("apply --cached") < script.index(" push --quiet")
    assert f"trap 'rm -rf {fresh} {workspace_execs.PUSH_PATCH}' EXIT" in script


def test_the_push_renders_the_push_pods_git_and_a_message_never_holds_the_token() -> None:
    """The message is the prompt's: the token's placeholder in it is not the token."""
    script = workspace_execs.push_exec("http://p:8080", PUSH, 9, message="<ironflow-token-mark> ' $HOME")[-1]
    assert "export IRONFLOW_PUSH_MESSAGE='<ironflow-token-mark> '\\'' $HOME'" in script
    assert script.count('"$ironflow_token"') == 1  # only the Authorization header's value


def test_the_push_needs_a_branch_and_refuses_a_source_the_relay_cannot_take() -> None:
    with pytest.raises(errors.ConfigError, match="push_branch"):
        workspace_execs.push_exec("http://p:8080", SPEC, 9, message="m")
    with pytest.raises(errors.ConfigError, match="invalid proxy address"):
        workspace_execs.push_exec("file:///x", PUSH, 9, message="m")
