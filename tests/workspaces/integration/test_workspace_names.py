"""Any file name a step makes comes back as that file's own content (issue 34, H2): names are never
handed to git newline-separated, so a name ``a<LF>.env`` cannot make the host read the worker's
``./.env`` into the patch, and a name holding every byte 1-255 travels intact."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import WORKSPACE_ISOLATIONS

from ironflow import errors
from ironflow.local.sandbox.environment import Isolation
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.workspaces import copies as local_workspaces
from ironflow.workspaces import Workspace

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git not installed"),
]

FAKE_KEY = b"sk-ant-api03-" + b"Zm9yLXRlc3RzLW9ubHk" * 4 + b"-AA"
#: Every byte 1-255 in a path: ``/`` is the separator, so the rest goes in two components (each <= 255 bytes).
EVERY_BYTE = bytes(b for b in range(1, 128) if b != 0x2F) + b"/" + bytes(range(128, 256))
#: The reviewer's case (``b`` took the worker's ``./.env`` as its content), and every byte.
NEWLINES = (b"a", b"a\n.env", b"b", b"b\n.env\nc")
EVERY = (b"a", EVERY_BYTE)
MAKE = """
import os, sys
for i, name in enumerate(eval(sys.argv[1])):
    if b"/" in name:
        os.makedirs(os.path.dirname(name), exist_ok=True)
    with open(name, "wb") as f:
        f.write(b"sandbox content %d\\n" % i)
"""


@pytest.fixture(params=WORKSPACE_ISOLATIONS)
def isolation(request: pytest.FixtureRequest) -> Isolation:
    chosen: Isolation = request.param
    return chosen


@pytest.fixture
def worker_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The worker's current directory, holding a ``.env`` with a key-shaped value (and an ``a``)."""
    cwd = tmp_path / "worker"
    cwd.mkdir()
    (cwd / ".env").write_bytes(b"ANTHROPIC_API_KEY=" + FAKE_KEY + b"\n")
    (cwd / "a").write_bytes(b"the worker's own a\n")
    (cwd / "c").write_bytes(FAKE_KEY)
    monkeypatch.chdir(cwd)
    return cwd


def _files(root: Path) -> dict[bytes, bytes]:
    out = {}
    for top, _, files in os.walk(os.fsencode(root)):
        for name in files:
            path = os.path.join(top, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, os.fsencode(root))] = f.read()
    return out


@pytest.mark.parametrize("names", [NEWLINES, EVERY], ids=["newlines", "every-byte"])
async def test_newline_and_every_byte_names_carry_the_sandboxs_content_only(
    isolation: Isolation, names: tuple[bytes, ...], tmp_path: Path, worker_cwd: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_bytes(b"kept\n")
    pristine = tmp_path / "pristine"
    shutil.copytree(repo, pristine)
    provider = LocalSandboxProvider(isolation=isolation)

    make = ["python3", "-c", MAKE, repr(names)]
    result = await provider.run_command(make, workspace=Workspace(str(repo), apply=True))

    assert result.exit_code == 0, result.stderr
    assert result.workspace is not None
    patch = result.workspace.patch
    assert FAKE_KEY not in patch
    assert b"the worker's own a" not in patch
    assert {os.fsencode(p) for p in result.workspace.changed_paths} == set(names)
    expected = {name: b"sandbox content %d\n" % i for i, name in enumerate(names)} | {b"README": b"kept\n"}
    assert _files(repo) == expected  # the apply wrote exactly the sandbox's bytes
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "PATH": os.environ["PATH"]}
    git = ["git", "apply", "--binary", "-"]
    applied = await asyncio.to_thread(subprocess.run, git, cwd=pristine, input=patch, env=env, check=False)
    assert applied.returncode == 0
    assert _files(pristine) == expected  # and git reads the same out of the patch


def test_a_name_git_will_not_record_is_named_never_dropped(tmp_path: Path, worker_cwd: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_bytes(b"kept\n")
    prepared = local_workspaces.prepare(Workspace(str(repo)), str(tmp_path), sandbox_uid=None)
    refused = Path(prepared.copy) / ".git." / "x\nz"
    refused.parent.mkdir()
    refused.write_bytes(b"a file git skips with a warning\n")
    (Path(prepared.copy) / "fine").write_bytes(b"fine\n")

    with pytest.raises(errors.WorkspaceUnsafe) as caught:
        local_workspaces.collect(prepared)

    assert "git cannot record" in str(caught.value)
    assert "'.git./x\\x0az'" in str(caught.value)  # named, the newline escaped
