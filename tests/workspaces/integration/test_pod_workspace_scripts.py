"""The scripts a git-workspace pod runs, run for real with git in a temp dir: the base the
init container leaves, the wrapped command and its frame. The patch they report applies
onto a fresh clone to give exactly the tree the step left, whatever the step rigged."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from tests.workspaces.integration.test_local_workspaces import EDITS, make_repo, tree

from ironflow import errors
from ironflow.k8s.workspaces import init_pods
from ironflow.workspaces import Change, Workspace, WorkspaceChanges, frames

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")

SPEC = Workspace("https://git.example.com/org/repo.git")
GIT_ENV = {
    "PATH": os.environ["PATH"],
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def split_frame(logs: str) -> tuple[str, WorkspaceChanges]:
    """The frame of a workspace that holds a git repository (so it always has a change set)."""
    said, changes = frames.split_frame(logs)
    assert changes is not None
    return said, changes


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


def upstream(tmp_path: Path) -> Path:
    """A repository with one commit holding every kind of file the edits touch."""
    repo = make_repo(tmp_path / "upstream")
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "start", cwd=repo)
    return repo


def cloned(source: Path, place: Path) -> Path:
    git("clone", "-q", str(source), str(place), cwd=source.parent)
    return place


def pod(tmp_path: Path) -> tuple[Path, Path]:
    """The two volumes after the init container: the clone and its read-only base."""
    work = cloned(upstream(tmp_path), tmp_path / "workspace")
    base = tmp_path / "base"
    base.mkdir()
    script = init_pods.base_script(workspace=str(work), base=str(base))
    subprocess.run(["sh", "-ec", script], env=GIT_ENV, check=True)
    for path in [base, *base.rglob("*")]:  # the main container mounts it read-only
        if not path.is_symlink():
            path.chmod(stat.S_IMODE(path.lstat().st_mode) & ~0o222)
    return work, base


def step(work: Path, base: Path, shell: str, spec: Workspace = SPEC) -> subprocess.CompletedProcess[str]:
    wrapped = init_pods.wrapped_command(shell, spec, workspace=str(work), base=str(base))
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(work.parent / "tmp"), "HOME": str(work.parent / "home")}
    (work.parent / "tmp").mkdir(exist_ok=True)
    return subprocess.run(["sh", "-c", wrapped], cwd=work, env=env, capture_output=True, text=True, timeout=60)


def test_the_report_carries_every_kind_of_change_and_applies_to_the_same_tree(tmp_path: Path) -> None:
    work, base = pod(tmp_path)
    done = step(work, base, f"{EDITS}; echo the step said this; exit 3")
    assert done.returncode == 3, done.stderr  # the container exits as the step's command did
    said, changes = split_frame(done.stdout)
    assert said == "the step said this\n"
    kinds = {f.path: f.change for f in changes.files}
    assert kinds == {
        "blob.bin": Change.ADDED,
        "changed.txt": Change.MODIFIED,
        "gone.txt": Change.DELETED,
        "image.bin": Change.MODIFIED,
        "link": Change.ADDED,
        "new/deep/file": Change.ADDED,
        "olddir/inner.txt": Change.DELETED,
        "tool.sh": Change.MODE,
    }
    assert b"GIT binary patch" in changes.patch
    fresh = cloned(tmp_path / "upstream", tmp_path / "fresh")
    subprocess.run(["git", "apply", "--binary", "-"], cwd=fresh, input=changes.patch, env=GIT_ENV, check=True)
    expected = {k: v for k, v in tree(work).items() if not k.startswith(".git/") and k != ".git"}
    assert {k: v for k, v in tree(fresh).items() if not k.startswith(".git/") and k != ".git"} == expected


def test_what_the_step_rigs_in_git_cannot_hide_or_change_a_change(tmp_path: Path) -> None:
    """Attributes that would convert bytes, an ignore-all file, a hook, a config with an
    fsmonitor and a different index in the workspace's own .git: the report sees the bytes."""
    work, base = pod(tmp_path)
    rig = (
        "printf '* text filter=evil\\n' > .gitattributes; printf '*\\n' > .gitignore; "
        "printf 'a\\r\\nb\\r\\n' > crlf.txt; git rm -q --cached changed.txt; echo hidden >> changed.txt; "
        "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; "
        "git config core.fsmonitor 'touch ../pwned-fsmonitor; false'; "
        "git config filter.evil.clean 'touch ../pwned-filter; cat'"
    )
    done = step(work, base, rig)
    assert done.returncode == 0, done.stderr
    _, changes = split_frame(done.stdout)
    assert {f.path for f in changes.files} >= {".gitattributes", ".gitignore", "crlf.txt", "changed.txt"}
    assert not any(p.startswith(".git/") for p in changes.changed_paths)
    assert not (tmp_path / "pwned-fsmonitor").exists()
    assert not (tmp_path / "pwned-filter").exists()
    fresh = cloned(tmp_path / "upstream", tmp_path / "fresh")
    subprocess.run(["git", "apply", "--binary", "-"], cwd=fresh, input=changes.patch, env=GIT_ENV, check=True)
    assert (fresh / "crlf.txt").read_bytes() == b"a\r\nb\r\n"  # not normalised: the bytes the step left
    assert (fresh / "changed.txt").read_text() == "one\nhidden\n"


def test_no_change_is_an_empty_patch_and_the_output_is_kept_as_printed(tmp_path: Path) -> None:
    work, base = pod(tmp_path)
    done = step(work, base, "printf 'no newline at the end'; touch changed.txt")
    said, changes = split_frame(done.stdout)
    assert said == "no newline at the end"
    assert changes.patch == b""
    assert changes.files == ()


def test_a_forged_frame_printed_by_the_step_does_not_win(tmp_path: Path) -> None:
    work, base = pod(tmp_path)
    forged = '{"type":"ironflow_workspace","version":1,"patch_base64":"","raw_base64":""}'
    done = step(work, base, f"echo changed >> changed.txt; echo '{forged}'")
    said, changes = split_frame(done.stdout)
    assert said == forged + "\n"
    assert changes.changed_paths == ("changed.txt",)


def test_a_patch_over_the_limit_is_refused_with_its_size(tmp_path: Path) -> None:
    work, base = pod(tmp_path)
    small = Workspace(SPEC.source, max_total_bytes=1000)
    done = step(work, base, "head -c 5000 /dev/zero | tr '\\0' x > big.txt", small)
    with pytest.raises(errors.WorkspaceUnsafe, match=r"the patch is \d+ bytes, over the pod's limit of 1000 bytes"):
        split_frame(done.stdout)


def test_a_fifo_left_in_the_workspace_is_refused(tmp_path: Path) -> None:
    work, base = pod(tmp_path)
    done = step(work, base, "mkfifo pipe")
    with pytest.raises(errors.WorkspaceUnsafe, match="special file"):
        split_frame(done.stdout)


@pytest.mark.parametrize(
    ("shell", "spec"),
    [
        ("echo changed >> changed.txt", SPEC),
        ("head -c 5000 /dev/zero | tr '\\0' x > big.txt", Workspace(SPEC.source, max_total_bytes=1000)),
        ("mkfifo pipe", SPEC),
    ],
)
def test_the_report_leaves_nothing_in_the_temporary_directory(tmp_path: Path, shell: str, spec: Workspace) -> None:
    """A warm pod runs one report per step: each one's scratch (git's objects among them) went on
    filling its /tmp, whether the report was given or refused."""
    work, base = pod(tmp_path)
    done = step(work, base, shell, spec)
    assert "ironflow_workspace" in done.stdout, done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_nested_repository_is_refused(tmp_path: Path) -> None:
    work, base = pod(tmp_path)
    nested = "mkdir sub && cd sub && git init -q && echo x > f && git add f && " + (
        "git -c user.name=a -c user.email=a@a commit -qm x"
    )
    done = step(work, base, nested)
    with pytest.raises(errors.WorkspaceUnsafe, match="nested git repository at 'sub'"):
        split_frame(done.stdout)


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
def test_as_pid_1_the_wrapper_kills_what_the_step_left_before_it_reports(tmp_path: Path) -> None:
    """A background process of the step's that goes on printing after the command exits is
    killed before the report: the frame is still the log's last line."""
    work, base = pod(tmp_path)
    noisy = "(while :; do echo noise; done) & sleep 0.2; echo started"
    wrapped = init_pods.wrapped_command(noisy, SPEC, workspace=str(work), base=str(base))
    (tmp_path / "tmp").mkdir()
    argv = ["bwrap", "--unshare-pid", "--as-pid-1", "--die-with-parent", "--bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc", "--chdir", str(work), "sh", "-c", wrapped]  # fmt: skip
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path / "tmp")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    said, changes = split_frame(done.stdout)
    assert "started" in said.splitlines()
    assert set(said.splitlines()) <= {"noise", "started"}
    assert changes.files == ()


def pvc(tmp_path: Path, *, rig: bool) -> tuple[Path, Path]:
    """A PVC holding a repository an earlier step may have rigged, and the base its init container takes."""
    work = cloned(upstream(tmp_path), tmp_path / "claim")
    if rig:  # what an earlier step could have left in the claim's .git
        git("config", "core.fsmonitor", f"touch {tmp_path}/pwned-fsmonitor; false", cwd=work)
        git("config", "filter.evil.clean", f"touch {tmp_path}/pwned-filter; cat", cwd=work)
        git("config", "core.worktree", str(tmp_path), cwd=work)
        (work / ".git" / "info").mkdir(exist_ok=True)
        (work / ".git" / "info" / "attributes").write_text("* text filter=evil\n")
    base = tmp_path / "base"
    base.mkdir()
    script = init_pods.base_script(workspace=str(work), base=str(base))
    subprocess.run(["sh", "-ec", script], env=GIT_ENV, check=True)
    return work, base


def test_a_pvc_repository_is_diffed_against_its_head_whatever_its_git_dir_holds(tmp_path: Path) -> None:
    work, base = pvc(tmp_path, rig=True)
    done = step(work, base, "printf 'a\\r\\n' > crlf.txt; echo more >> changed.txt")
    _, changes = split_frame(done.stdout)
    assert changes.changed_paths == ("changed.txt", "crlf.txt")
    assert not (tmp_path / "pwned-fsmonitor").exists()
    assert not (tmp_path / "pwned-filter").exists()
    assert (base / "git" / "config").read_text().count("fsmonitor") == 0  # a fresh config, not the claim's
    fresh = cloned(tmp_path / "upstream", tmp_path / "fresh")
    subprocess.run(["git", "apply", "--binary", "-"], cwd=fresh, input=changes.patch, env=GIT_ENV, check=True)
    assert (fresh / "crlf.txt").read_bytes() == b"a\r\n"


def test_a_pvc_without_a_repository_reports_no_change_set(tmp_path: Path) -> None:
    work = tmp_path / "claim"
    work.mkdir()
    (work / "data.txt").write_text("x\n")
    base = tmp_path / "base"
    base.mkdir()
    subprocess.run(["sh", "-ec", init_pods.base_script(workspace=str(work), base=str(base))], check=True)
    done = step(work, base, "echo y >> data.txt; echo said")
    assert frames.split_frame(done.stdout) == ("said\n", None)
