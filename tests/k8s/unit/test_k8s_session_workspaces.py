"""A cluster session's git workspace, as values: what is refused before anything is made, the
clone and report execs, and what the session's object records for another process."""

from __future__ import annotations

import pytest

from ironflow import errors
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.k8s.sessions import clones, wire
from ironflow.k8s.settings import ProviderSettings
from ironflow.k8s.workspaces import clone_exec
from ironflow.secrets import Secret
from ironflow.workspaces import Workspace

HOST = "git.example.test"
SPEC = Workspace(f"https://{HOST}/org/repo.git", ref="main")
COMMIT = "a" * 40
WHERE = clone_exec.paths("/home/claude")
HOSTS = GitHosts({HOST: GitCredential(Secret("ghs_password"), "x-access-token")})
PROXIED = ProviderSettings(image="runner:test", auth_proxy_url="http://proxy:8080", git_hosts=HOSTS)


def test_paths_sit_under_home() -> None:
    assert (WHERE.workspace, WHERE.base) == ("/home/claude/workspace", "/home/claude/.ironflow/workspace-base")


@pytest.mark.parametrize(
    ("settings", "spec", "said"),
    [
        (PROXIED, Workspace("/srv/repo"), "cannot see '/srv/repo' on this machine: give its workspace as GIT_URL"),
        (PROXIED, Workspace("pvc:data"), "cannot see 'pvc:data'"),
        (PROXIED, Workspace(SPEC.source, push_branch="fix"), "cannot push: take its patch with changes()"),
        (ProviderSettings(image="runner:test"), SPEC, "needs auth_proxy(url)"),
    ],
)
def test_what_a_cluster_session_refuses_before_anything_is_made(
    settings: ProviderSettings, spec: Workspace, said: str
) -> None:
    with pytest.raises(errors.WorkspaceRefused) as caught:
        clones.check(settings, spec)
    assert said in caught.value.message
    assert "\n" not in caught.value.message


def test_a_git_workspace_clones_with_the_hosts_proxied_secret() -> None:
    secret = clones.check(PROXIED, SPEC)
    assert "ghs_password" not in repr(secret)


def test_apply_is_refused_in_one_line() -> None:
    message = clones.refuse_apply().message
    assert "no host directory to apply to" in message
    assert "\n" not in message


def test_the_clone_reads_its_token_from_stdin_only() -> None:
    argv = clone_exec.clone_exec("http://proxy:8080", SPEC, 52, WHERE)
    assert argv[:2] == ("sh", "-c")
    assert "ironflow_token=$(head -c 52)" in argv[2]
    assert clone_exec.TOKEN_MARK not in argv[2]
    assert "rm -rf '/home/claude/workspace' '/home/claude/.ironflow/workspace-base'" in argv[2]


@pytest.mark.parametrize("ref", ["main", COMMIT])
def test_each_git_command_of_the_clone_is_retried_while_it_cannot_connect(ref: str) -> None:
    """A session's pod is new to the NetworkPolicies when it clones (kube-router programs them after
    the pod starts and refuses its connections meanwhile): the clone's git commands are retried as an
    init clone's are, not failed at the first refusal (a clone exited 128 once on the real node)."""
    script = clone_exec.clone_exec("http://proxy:8080", Workspace(SPEC.source, ref=ref), 52, WHERE)[2]
    lines = script.splitlines()
    reaching = [line for line in lines if line.split(" ", 1)[0] in ("git", "ironflow_connect") and "/r/" in line]
    assert reaching
    assert all(line.startswith("ironflow_connect git ") for line in reaching), reaching
    assert any(line.startswith("( ironflow_connect() {") for line in lines)  # defined where it is used


def test_the_report_verifies_the_recorded_commit_and_refuses_another_shape() -> None:
    argv = clone_exec.report_exec(SPEC, COMMIT, WHERE)
    assert f"ironflow_base={COMMIT}" in argv[2]
    assert argv[2].endswith("ironflow_report\n")
    with pytest.raises(errors.ConfigError, match="full lowercase commit id"):
        clone_exec.report_exec(SPEC, "HEAD", WHERE)


def test_the_session_object_records_the_workspace_for_another_process() -> None:
    held = clones.Held(SPEC, COMMIT)
    recorded = clones.workspace_annotations(held)
    assert clones.held_of(recorded) == held
    no_ref = clones.Held(Workspace(SPEC.source), COMMIT)
    assert clones.held_of(clones.workspace_annotations(no_ref)) == no_ref
    assert clones.held_of({}) is None
    assert clones.held_of(None) is None


def test_the_runtime_is_rooted_at_the_workspace_when_given() -> None:
    sizes = tuple(range(1, len(wire.RUNTIME_FILES) + 1))
    default = wire.runtime_command(sizes, max_upload_bytes=1, max_output_bytes=1)
    rooted = wire.runtime_command(sizes, max_upload_bytes=1, max_output_bytes=1, workspace=WHERE.workspace)
    assert default[default.index("--workspace") + 1] == "."
    assert rooted[rooted.index("--workspace") + 1] == WHERE.workspace
