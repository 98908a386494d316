"""A workspace in a real sandbox (bubblewrap, gVisor): the host tree untouched, the patch exact, the host safe."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import ALL_WORKSPACE_ISOLATIONS

from ironflow import errors
from ironflow.local.sandbox import bwrap, gvisor
from ironflow.local.sandbox.environment import Isolation
from ironflow.local.sandbox_provider import LocalSandboxProvider, ProxyCredential
from ironflow.local.workspaces import copies as local_workspaces
from ironflow.local.workspaces import writeback
from ironflow.secrets import Secret
from ironflow.workspaces import Change, Workspace

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git not installed"),
]

#: What a command does to its workspace: every kind of change a patch must carry.
EDITS = (
    "echo more >> changed.txt; rm gone.txt; chmod +x tool.sh; printf '\\000\\001\\377' > blob.bin; "
    "mkdir -p new/deep && echo hi > new/deep/file; ln -s changed.txt link; printf 'x\\000y' >> image.bin; "
    "rm -r olddir"
)


@pytest.fixture(params=ALL_WORKSPACE_ISOLATIONS)
def isolation(request: pytest.FixtureRequest) -> Isolation:
    """Each sandbox test runs under every runtime (Docker's on a root worker)."""
    chosen: Isolation = request.param
    return chosen


def tree(root: Path, *, stat_too: bool = False) -> dict[str, tuple[object, ...]]:
    """Every path under ``root``: its kind, bytes or link text, executable bit (and with
    ``stat_too`` its mode and mtime: byte-identical means those too)."""
    out: dict[str, tuple[object, ...]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        extra = (st.st_mode, st.st_mtime_ns) if stat_too else ()
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path), *extra)
        elif path.is_dir():
            if stat_too:
                out[rel] = ("dir", *extra)
        else:
            out[rel] = ("file", path.read_bytes(), bool(st.st_mode & 0o111), *extra)
    return out


def host_root() -> set[str]:
    return set(os.listdir("/"))


def make_repo(root: Path) -> Path:
    root.mkdir()
    (root / "changed.txt").write_text("one\n")
    (root / "gone.txt").write_text("bye\n")
    (root / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    (root / "image.bin").write_bytes(bytes(range(256)) * 4)
    (root / "olddir").mkdir()
    (root / "olddir" / "inner.txt").write_text("inner\n")
    (root / "kept").mkdir()
    (root / "kept" / "same.txt").write_text("same\n")
    return root


def git_apply(patch: bytes, onto: Path) -> None:
    done = subprocess.run(["git", "apply", "--binary", "-"], input=patch, cwd=onto, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr


async def test_the_host_tree_is_untouched_and_the_patch_rebuilds_exactly_what_the_command_made(
    tmp_path: Path, isolation: Isolation
) -> None:
    repo = make_repo(tmp_path / "repo")
    before = tree(repo, stat_too=True)
    top = host_root()
    async with LocalSandboxProvider(isolation=isolation) as provider:
        result = await provider.run_command(["sh", "-c", EDITS], workspace=Workspace(str(repo)))
    assert result.exit_code == 0, result.stderr
    assert tree(repo, stat_too=True) == before  # byte-identical: modes and times too
    assert host_root() == top  # no mount point made on the host (runsc makes a bind's in the host's root)
    assert result.workspace is not None
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    git_apply(result.workspace.patch, copy)
    expected = {
        **{k: v for k, v in tree(repo).items() if not k.startswith(("gone.txt", "olddir"))},
        "changed.txt": ("file", b"one\nmore\n", False),
        "tool.sh": ("file", b"#!/bin/sh\necho tool\n", True),
        "blob.bin": ("file", b"\x00\x01\xff", False),
        "new/deep/file": ("file", b"hi\n", False),
        "link": ("link", "changed.txt"),
        "image.bin": ("file", bytes(range(256)) * 4 + b"x\x00y", False),
    }
    assert tree(copy) == expected
    changes = {f.path: f.change for f in result.workspace.files}
    assert changes == {
        "blob.bin": Change.ADDED,
        "changed.txt": Change.MODIFIED,
        "gone.txt": Change.DELETED,
        "image.bin": Change.MODIFIED,
        "link": Change.ADDED,
        "new/deep/file": Change.ADDED,
        "olddir/inner.txt": Change.DELETED,
        "tool.sh": Change.MODE,
    }
    assert b"GIT binary patch" in result.workspace.patch


async def test_apply_writes_the_same_tree_into_the_host_directory(tmp_path: Path, isolation: Isolation) -> None:
    repo = make_repo(tmp_path / "repo")
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    async with LocalSandboxProvider(isolation=isolation) as provider:
        result = await provider.run_command(["sh", "-c", EDITS], workspace=Workspace(str(repo), apply=True))
    assert result.workspace is not None
    assert result.workspace.applied
    git_apply(result.workspace.patch, copy)
    assert tree(repo) == tree(copy)
    assert not (repo / "olddir").exists()  # emptied by the deletion, as git apply leaves it


async def test_a_failed_command_is_not_applied_and_each_run_starts_from_the_original(
    tmp_path: Path, isolation: Isolation
) -> None:
    repo = make_repo(tmp_path / "repo")
    before = tree(repo)
    async with LocalSandboxProvider(isolation=isolation) as provider:
        failed = await provider.run_command(
            ["sh", "-c", "echo x >> changed.txt; exit 3"], workspace=Workspace(str(repo), apply=True)
        )
        again = await provider.run_command(["cat", "changed.txt"], workspace=Workspace(str(repo)))
    assert failed.exit_code == 3
    assert failed.workspace is not None
    assert failed.workspace.changed_paths == ("changed.txt",)
    assert not failed.workspace.applied
    assert tree(repo) == before
    assert again.stdout == "one\n"  # a retry sees the original state, not the last attempt's
    assert again.workspace is not None
    assert again.workspace.files == ()


async def test_symlinks_in_the_source_reach_nothing_outside_the_workspace(tmp_path: Path, isolation: Isolation) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host-only secret\n")
    repo = make_repo(tmp_path / "repo")
    (repo / "abs").symlink_to(secret)
    (repo / "rel").symlink_to("../secret.txt")
    (repo / "updir").symlink_to("..")
    async with LocalSandboxProvider(isolation=isolation) as provider:
        result = await provider.run_command(
            [
                "sh",
                "-c",
                "cat abs rel updir/secret.txt; echo owned > abs; echo owned > rel; echo owned > updir/x; true",
            ],
            workspace=Workspace(str(repo), apply=True),
        )
    assert "host-only secret" not in result.stdout
    assert secret.read_text() == "host-only secret\n"
    assert not (tmp_path / "x").exists()
    assert result.workspace is not None
    assert result.workspace.files == ()


async def test_the_steps_symlink_out_of_the_tree_is_in_the_patch_but_never_applied(
    tmp_path: Path, isolation: Isolation
) -> None:
    repo = make_repo(tmp_path / "repo")
    async with LocalSandboxProvider(isolation=isolation) as provider:
        with pytest.raises(errors.WorkspaceConflict, match=re.escape("outside the workspace: 'escape'")) as caught:
            await provider.run_command(
                ["sh", "-c", "ln -s /etc/shadow escape; echo x >> changed.txt"],
                workspace=Workspace(str(repo), apply=True),
            )
    assert caught.value.paths == ("escape",)
    assert not (repo / "escape").exists()
    assert (repo / "changed.txt").read_text() == "one\n"  # nothing written


def armed_repository(repo: Path, marker: Path) -> None:
    """A git repository whose hook and ``core.fsmonitor`` touch ``marker`` if git ever runs them."""
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    subprocess.run(["git", "-C", str(repo), "config", "core.fsmonitor", f"touch {marker} #"], check=True)
    subprocess.run(["git", "-C", str(repo), "config", "core.hooksPath", str(hook.parent)], check=True)


async def test_git_settings_and_hooks_never_run_and_never_come_back(tmp_path: Path, isolation: Isolation) -> None:
    repo = make_repo(tmp_path / "repo")
    marker = tmp_path / "hook-ran"
    armed_repository(repo, marker)
    git_before = tree(repo / ".git", stat_too=True)
    evil = "[core]\\n\\tfsmonitor = touch /tmp/pwned #\\n"
    async with LocalSandboxProvider(isolation=isolation) as provider:
        result = await provider.run_command(
            ["sh", "-c", f"echo fixed >> changed.txt; printf '{evil}' >> .git/config; "
             "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/pre-commit; "
             "mkdir -p sub/.git; echo x > sub/.git/HEAD"],
            workspace=Workspace(str(repo), apply=True),
        )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.workspace is not None
    assert result.workspace.changed_paths == ("changed.txt",)
    assert b".git" not in result.workspace.patch
    assert (repo / "changed.txt").read_text() == "one\nfixed\n"
    assert tree(repo / ".git", stat_too=True) == git_before  # the apply wrote nothing of git's
    assert not marker.exists()  # no hook or fsmonitor of the repository ran for the diff or the apply
    assert not (repo / "sub").exists()


async def test_special_and_oversized_files_are_refused_both_ways(tmp_path: Path, isolation: Isolation) -> None:
    repo = make_repo(tmp_path / "repo")
    fifo = repo / "pipe"
    os.mkfifo(fifo)
    async with LocalSandboxProvider(isolation=isolation) as provider:
        with pytest.raises(errors.WorkspaceRefused, match=re.escape("holds a FIFO at 'pipe'")):
            await provider.run_command(["true"], workspace=Workspace(str(repo)))
        fifo.unlink()
        with pytest.raises(errors.WorkspaceRefused, match=re.escape("'image.bin' of 1024 bytes, over")):
            await provider.run_command(["true"], workspace=Workspace(str(repo), max_file_bytes=1000))
        with pytest.raises(errors.WorkspaceRefused, match="max_total_bytes"):
            await provider.run_command(["true"], workspace=Workspace(str(repo), max_total_bytes=1000))
        if isolation == "gvisor":  # a FIFO gVisor makes lives in its own kernel: it never reaches the host's copy
            made = await provider.run_command(["mkfifo", "made"], workspace=Workspace(str(repo), apply=True))
            assert made.exit_code == 0, made.stderr
            assert made.workspace is not None
            assert made.workspace.files == ()
        else:
            with pytest.raises(errors.WorkspaceUnsafe, match=re.escape("the step's workspace holds a FIFO at 'made'")):
                await provider.run_command(["mkfifo", "made"], workspace=Workspace(str(repo), apply=True))
        with pytest.raises(errors.WorkspaceUnsafe, match=re.escape("'big' of 4096 bytes")):
            await provider.run_command(
                ["sh", "-c", "head -c 4096 /dev/zero > big"], workspace=Workspace(str(repo), max_file_bytes=2048)
            )
    assert not (repo / "made").exists()
    assert not (repo / "big").exists()


def test_a_host_path_changed_during_the_step_fails_the_diff_and_the_apply_changes_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    run = tmp_path / "run"
    run.mkdir()
    spec = Workspace(str(repo), apply=True)
    prepared = local_workspaces.prepare(spec, str(run), sandbox_uid=None)
    (Path(prepared.copy) / "changed.txt").write_text("step\n")
    (repo / "changed.txt").write_text("host edit\n")
    moved = re.escape("changed on the host while the step ran: 'changed.txt'")
    with pytest.raises(errors.WorkspaceConflict, match=moved):
        local_workspaces.collect(prepared)

    (repo / "changed.txt").write_text("one\n")
    again = tmp_path / "again"
    again.mkdir()
    prepared = local_workspaces.prepare(spec, str(again), sandbox_uid=None)
    (Path(prepared.copy) / "changed.txt").write_text("step\n")
    (Path(prepared.copy) / "kept" / "new.txt").write_text("new\n")
    changes = local_workspaces.collect(prepared)
    before = tree(repo)
    (repo / "kept" / "new.txt").write_text("the host made it first\n")
    raced = re.escape("changed on the host since the copy was made: 'kept/new.txt'")
    with pytest.raises(errors.WorkspaceConflict, match=raced):
        writeback.apply_changes(prepared, changes)
    (repo / "kept" / "new.txt").unlink()
    assert tree(repo) == before  # the other change was not written either


def test_a_snapshot_keeps_the_earlier_entry_of_each_path_that_did_not_move(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "link").symlink_to("changed.txt")
    spec = Workspace(str(repo))
    first = local_workspaces.snapshot(str(repo), spec, whose="the test's tree")
    with (repo / "changed.txt").open("a") as f:
        f.write("more\n")
    (repo / "tool.sh").chmod(0o755)
    os.utime(repo / "kept" / "same.txt", ns=(0, 0))
    (repo / "link").unlink()
    (repo / "link").symlink_to("gone.txt")
    (repo / "image.bin").unlink()
    (repo / "fresh.txt").write_text("new\n")
    again = local_workspaces.snapshot(str(repo), spec, whose="the test's tree", earlier=first)
    assert again == local_workspaces.snapshot(str(repo), spec, whose="the test's tree")
    moved = {path for path, entry in again.items() if first.get(path) is not entry}
    assert moved == {"changed.txt", "tool.sh", "kept/same.txt", "link", "fresh.txt"}
    assert again.keys() - moved == {"gone.txt", "olddir", "olddir/inner.txt", "kept"}  # each first's own entry


def test_the_apply_never_writes_through_a_symlink_on_the_host(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    prepared = local_workspaces.prepare(Workspace(str(repo)), str(run), sandbox_uid=None)
    (Path(prepared.copy) / "kept" / "same.txt").write_text("step\n")
    changes = local_workspaces.collect(prepared)
    shutil.move(repo / "kept", outside / "kept")
    (repo / "kept").symlink_to(outside / "kept")  # swapped in after the copy was made
    with pytest.raises(errors.WorkspaceConflict, match=re.escape("'kept/same.txt'")):
        writeback.apply_changes(prepared, changes)
    assert (outside / "kept" / "same.txt").read_text() == "same\n"


@pytest.fixture
def visible_temp() -> Iterator[Path]:
    """A provider ``temp_dir`` both sandboxes show (not under /tmp, /var/tmp or a home)."""
    place = Path(tempfile.mkdtemp(prefix="ifl-temp-", dir="/var/lib"))
    place.chmod(0o755)
    yield place
    shutil.rmtree(place, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="a root worker's run dir is another uid's than the sandbox's")
async def test_the_copys_host_path_and_its_run_dir_are_out_of_the_steps_reach(
    tmp_path: Path, isolation: Isolation, visible_temp: Path
) -> None:
    """With a ``temp_dir`` the sandbox can see (gVisor binds the copy at its own host path there),
    the run dir is still closed to the step: no way round ``/workspace`` to the spec or the object store."""
    repo = make_repo(tmp_path / "repo")
    temp = visible_temp
    key = ProxyCredential(Secret("sk-ant-api03-run-dir-test"), "api_key", "http://127.0.0.1:9")
    reach = (
        f"for run in {temp}/ironflow-local-*; do cat $run/workspace/changed.txt; cd $run && echo entered; done; "
        f"touch {temp}/x; true"
    )
    async with LocalSandboxProvider(isolation=isolation, temp_dir=str(temp), credential=key) as provider:
        result = await provider.run_command(["sh", "-c", reach], workspace=Workspace(str(repo)), auth_proxy=True)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""  # neither the copy's text by its host path, nor the run dir entered
    if isolation == "docker":  # a container shows no host path at all
        assert f"'{temp}/ironflow-local-*/workspace/changed.txt': No such file" in result.stderr, result.stderr
    else:  # the other runtimes show it, closed
        assert "workspace/changed.txt: Permission denied" in result.stderr, result.stderr
    assert "can't cd to" in result.stderr
    assert not (temp / "x").exists()


def test_a_non_root_worker_gets_nothing_writable_under_gvisor(tmp_path: Path) -> None:
    """Rootless runsc shows a non-root worker's files as root's: the step's uid could not write them."""
    repo = make_repo(tmp_path / "repo")
    with pytest.raises(errors.ConfigError, match=re.escape(gvisor.WRITABLE_NEEDS_ROOT)):
        local_workspaces.check_mounts("gvisor", None, (), (), Workspace(str(repo)))
    with pytest.raises(errors.ConfigError, match="needs a worker running as root"):
        local_workspaces.check_mounts("gvisor", None, (bwrap.WritableMount(str(repo), "/data"),), (), None)
    local_workspaces.check_mounts("bwrap", None, (), (), Workspace(str(repo)))  # bubblewrap maps the worker's uid


async def test_the_steps_tools_work_in_the_workspace(tmp_path: Path, isolation: Isolation) -> None:
    """git, find, ls, Python's and Node's stat (Claude Code's file tools) see the workspace as it is.

    (Not ``ls NAME`` or ``ls -l``: this gVisor release answers coreutils' ``statx`` with
    ``AT_NO_AUTOMOUNT`` EINVAL, anywhere in the sandbox; docs/local-sandbox.md.)"""
    repo = make_repo(tmp_path / "repo")
    node = shutil.which("node")
    script = (
        "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm s && echo x >> changed.txt && "
        "git status --porcelain && find . -name same.txt && cd kept && ls && cd .. && "
        "python3 -c 'import os; print(oct(os.stat(\"tool.sh\").st_mode & 0o777))'"
    )
    if node is not None:
        script += f' && {node} -e \'console.log(require("fs").statSync("image.bin").size)\''
    async with LocalSandboxProvider(isolation=isolation) as provider:
        result = await provider.run_command(["sh", "-c", script], workspace=Workspace(str(repo)))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[:4] == [" M changed.txt", "./kept/same.txt", "same.txt", "0o644"]
    if node is not None:
        assert result.stdout.splitlines()[4] == "1024"
    assert result.workspace is not None
    assert result.workspace.changed_paths == ("changed.txt",)  # the step's own .git never counts


def ironflow(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", "from ironflow.cli.app import main; main()", *args],
        env={k: v for k, v in os.environ.items() if not k.startswith("IRONFLOW_GIT_")},
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_exec_with_workspace_patch_and_apply_from_the_command_line(tmp_path: Path, isolation: Isolation) -> None:
    repo = make_repo(tmp_path / "repo")
    before = tree(repo, stat_too=True)
    out = tmp_path / "out.patch"
    done = ironflow(
        "exec", "--isolation", isolation, "--workspace", str(repo), "--patch", str(out), "--", "sh", "-c", EDITS
    )
    assert done.returncode == 0, done.stderr
    assert tree(repo, stat_too=True) == before
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    git_apply(out.read_bytes(), copy)
    done = ironflow(
        "exec", "--isolation", isolation, "--workspace", str(repo), "--apply", "--patch", "-", "--", "sh", "-c", EDITS
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == out.read_bytes()  # with --patch -, stdout holds the patch alone
    assert tree(repo) == tree(copy)


def test_exec_forwards_piped_stdin_and_mounts(tmp_path: Path, isolation: Isolation) -> None:
    exec_ = ("exec", "--isolation", isolation)
    assert ironflow(*exec_, "--", "cat", stdin=b"x\n").stdout == b"x\n"
    assert ironflow(*exec_, "--no-stdin", "--", "sh", "-c", "cat; echo end", stdin=b"x\n").stdout == b"end\n"
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "in.txt").write_text("read me\n")
    shared.chmod(0o777)  # only the read-only mount may stop the write
    done = ironflow(*exec_, "--mount", f"{shared}:/data/in", "--", "sh", "-c", "cat /data/in/in.txt; touch /data/in/w")
    assert done.stdout == b"read me\n"
    assert b"Read-only file system" in done.stderr
    assert not (shared / "w").exists()


def test_exec_writes_a_rw_mount_on_the_host_as_the_sandboxs_uid(tmp_path: Path, isolation: Isolation) -> None:
    shared = tmp_path / "out"
    shared.mkdir()
    if os.geteuid() == 0:
        os.chown(shared, 10001, 10001)  # the sandbox's uid on a root worker, as the refusal says
    script = "mkdir d && echo made > d/f && ln -s d/f l && chmod +x d/f && cat /data/out/l"
    done = ironflow("exec", "--isolation", isolation, "--mount", f"{shared}:/data/out:rw", "--", "sh", "-c",
                    f"cd /data/out && {script}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"made\n"
    assert (shared / "d" / "f").read_text() == "made\n"
    assert os.access(shared / "d" / "f", os.X_OK)
    assert os.readlink(shared / "l") == "d/f"
    if os.geteuid() == 0:
        assert (shared / "d" / "f").stat().st_uid == 10001
    taken = ironflow("exec", "--isolation", isolation, "--mount", f"{tmp_path}:/data/out:rw", "--", "true")
    assert taken.returncode == 2
    if os.geteuid() == 0:
        assert b"must be owned by the sandbox's host uid" in taken.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--patch", "p"), b"--patch, --apply and --push need --workspace"),
        (("--workspace", "https://github.com/o/r.git"), b"needs the host's token in IRONFLOW_GIT_TOKEN"),
        (("--workspace", "https://github.com/o/r.git", "--apply"), b"--push BRANCH"),
        (("--workspace", "https://u:p@github.com/o/r.git"), b"no user name or password"),
        (("--workspace", ".", "--push", "b"), b"--push needs a git workspace"),
        (("--workspace", "/no/such/dir"), b"is not a directory"),
        (("--mount", "/etc"), b"must be SRC:DST"),
        (("--mount", "/etc:/data:rx"), b"must be SRC:DST"),
        (("--mount", "/etc:data"), b"must be an absolute path"),
    ],
)
def test_bad_workspace_options_are_one_line_and_exit_2(args: tuple[str, ...], message: bytes) -> None:
    done = ironflow("exec", *args, "--", "true")
    assert done.returncode == 2
    assert done.stderr.startswith(b"error: ")
    assert message in done.stderr
    assert done.stderr.count(b"\n") == 1


@pytest.mark.claude_cli
def test_the_real_claude_cli_edits_its_workspace_and_the_patch_comes_back(tmp_path: Path, isolation: Isolation) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    script = tmp_path / "fix.yaml"
    script.write_text(
        "turns:\n"
        "  - tool_use: {name: Edit, input: {file_path: /workspace/calc.py, "
        "old_string: 'return a - b', new_string: 'return a + b'}}\n"
        "  - tool_use: {name: Write, input: {file_path: /workspace/tests/test_calc.py, "
        'content: "assert add(1, 2) == 3\\n"}}\n'
        "  - text: fixed add()\n"
    )
    out = tmp_path / "fix.patch"
    done = ironflow(
        "agent", "--isolation", isolation, "--workspace", str(repo), "--allowed-tools", "Edit,Write",
        "--patch", str(out), f"--fake-model={script}", "-o", "json", "fix the bug in calc.py",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["value"] == "fixed add()"
    assert answer["changed_files"] == [
        {"path": "calc.py", "change": "modified"},
        {"path": "tests/test_calc.py", "change": "added"},
    ]
    assert out.read_bytes() == answer["patch"].encode()
    assert b"-    return a - b\n+    return a + b\n" in out.read_bytes()
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    git_apply(out.read_bytes(), copy)
    assert (copy / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (copy / "tests" / "test_calc.py").read_text() == "assert add(1, 2) == 3\n"
