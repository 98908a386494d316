"""The pure rules of a workspace: which paths are changes, which are git's own, which escape."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import errors
from ironflow.k8s.step_objects import refuse_workspace
from ironflow.steps import AgentConfig
from ironflow.workspaces import (
    Change,
    ChangedFile,
    Entry,
    Kind,
    Workspace,
    WorkspaceChanges,
    candidates,
    confirm,
    escapes,
    git_mode,
    is_git_internal,
)

FILE = Entry(Kind.FILE, 0o644, 3, 100, 200)
DIR = Entry(Kind.DIR, 0o755, 0, 100, 200)


def test_candidates_are_files_and_links_whose_lstat_moved_sorted() -> None:
    before = {"a": FILE, "b": FILE, "d": DIR, "d/x": FILE, "same": FILE}
    after = {
        "a": Entry(Kind.FILE, 0o644, 4, 101, 201),  # rewritten
        "c": Entry(Kind.SYMLINK, 0o777, 1, 1, 1, "a"),  # new link
        "d": DIR,
        "same": FILE,
        "e": DIR,  # a new empty directory: git tracks none
    }
    found = candidates(before, after)
    assert [(c.path, c.change) for c in found] == [
        ("a", Change.MODIFIED),
        ("b", Change.DELETED),
        ("c", Change.ADDED),
        ("d/x", Change.DELETED),
    ]


def test_a_file_turned_into_a_directory_is_its_deletion_plus_the_new_files() -> None:
    found = candidates({"x": FILE}, {"x": DIR, "x/y": FILE})
    assert [(c.path, c.change) for c in found] == [("x", Change.DELETED), ("x/y", Change.ADDED)]


def test_a_reset_mtime_still_shows_through_ctime() -> None:
    touched = Entry(Kind.FILE, 0o644, 3, 100, 999)
    assert [c.path for c in candidates({"f": FILE}, {"f": touched})] == ["f"]


@pytest.mark.parametrize("path", [".git/config", "sub/.git/hooks/pre-commit", ".GIT/config", ".git", "a/.Git"])
def test_paths_in_a_git_directory_are_never_changes(path: str) -> None:
    assert is_git_internal(path)
    assert candidates({}, {path: FILE}) == ()


@pytest.mark.parametrize("path", [".gitignore", "a.git/x", "git/config", ".github/workflows/ci.yml"])
def test_paths_near_git_are_ordinary(path: str) -> None:
    assert not is_git_internal(path)


def test_confirm_drops_an_unchanged_file_and_names_a_mode_change() -> None:
    rewritten = ChangedFile("f", Change.MODIFIED, FILE, Entry(Kind.FILE, 0o644, 3, 100, 300))
    assert confirm(rewritten, "a" * 40, "a" * 40) is None
    made_executable = ChangedFile("f", Change.MODIFIED, FILE, Entry(Kind.FILE, 0o755, 3, 100, 300))
    kept = confirm(made_executable, "a" * 40, "a" * 40)
    assert kept is not None
    assert kept.change is Change.MODE
    assert confirm(rewritten, "a" * 40, "b" * 40) == rewritten
    assert git_mode(Entry(Kind.FILE, 0o700, 0, 0)) == "100755"
    assert git_mode(Entry(Kind.SYMLINK, 0o777, 0, 0, 0, "x")) == "120000"


@pytest.mark.parametrize(
    ("path", "target", "out"),
    [
        ("a", "/etc/passwd", True),
        ("a", "../x", True),
        ("d/a", "../x", False),
        ("d/a", "../../x", True),
        ("d/a", "e/../../..", True),
        ("a", "b/c", False),
        ("a", ".", False),
    ],
)
def test_escapes(path: str, target: str, out: bool) -> None:
    assert escapes(path, target) is out


@given(st.binary(max_size=200))
def test_changes_survive_json_whatever_the_patch_bytes(patch: bytes) -> None:
    changes = WorkspaceChanges(patch, (ChangedFile("a b", Change.ADDED, None, None),), applied=True)
    back = WorkspaceChanges.from_json(changes.to_json())
    assert back.patch == patch
    assert back.changed_paths == ("a b",)
    assert back.applied


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": ""}, "host directory"),
        ({"source": "a\x00b"}, "host directory"),
        ({"source": "/x", "max_file_bytes": 0}, "max_file_bytes"),
        ({"source": "/x", "max_total_bytes": True}, "max_total_bytes"),
    ],
)
def test_a_workspace_refuses_values_that_cannot_work(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        Workspace(**kwargs)  # type: ignore[arg-type]


def test_a_step_file_names_its_workspace_and_it_round_trips() -> None:
    config = AgentConfig.from_dict({"prompt": "fix", "workspace": {"source": "/repo", "apply": True}})
    assert config.workspace == Workspace("/repo", apply=True)
    assert AgentConfig.from_dict(config.to_dict()) == config
    with pytest.raises(errors.ConfigError, match="workspace"):
        AgentConfig.from_dict({"prompt": "fix", "workspace": {"source": "/repo", "colour": 1}})


def test_an_agent_sandbox_step_takes_a_git_workspace_only_and_says_where_the_others_run() -> None:
    refuse_workspace(AgentConfig("fix"))
    refuse_workspace(AgentConfig("fix", workspace=Workspace("https://github.com/org/repo.git")))
    with pytest.raises(errors.StepConfigError, match="pvc: workspace on --backend k8s, or a directory on --backend"):
        refuse_workspace(AgentConfig("fix", workspace=Workspace("/repo")))
    with pytest.raises(errors.StepConfigError, match="pvc: workspace on --backend k8s"):
        refuse_workspace(AgentConfig("fix", workspace=Workspace("pvc:sources")))
    refuse_workspace(AgentConfig("fix", workspace=Workspace("https://github.com/org/repo.git", push_branch="b")))
