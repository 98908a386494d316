"""A sandbox's first process starts in its cgroup, with its rlimits, as the host uid (real ironflow-enter,
bash, setpriv, cgroups): what it reads of itself as it starts shows all three, whether a root worker's
gated start put it there (``ironflow-enter``, or without it bash, which joins by itself, then waits at its
gate) or it set itself up between fork and exec; a gated start whose first process cannot join its cgroup
runs nothing."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import pytest

from ironflow import errors
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import cgroups, identity, launch, spawn
from ironflow.local.sandbox import limits as sandbox_limits

SUPPORT = cgroups.probe()
HOST_UID = 10001
LIMITS = sandbox_limits.SandboxLimits(open_files=77, file_size_bytes=5 << 20)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the host uid drop and the gated bash are a root worker's"),
    pytest.mark.skipif(not SUPPORT.version, reason=SUPPORT.describe()),
    pytest.mark.skipif(shutil.which("setpriv") is None or shutil.which("bash") is None, reason="no setpriv or bash"),
]


#: How a gated start sets its first process up: scripts/install's ironflow-enter, or bash and setpriv.
GATED = ["entered", "bash"]


@pytest.fixture
def first_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The gated start's way (the test's ``gated`` parameter): without ironflow-enter, bash and setpriv."""
    way: str = request.param
    if way == "bash":
        monkeypatch.setattr(spawn, "enter_binary", lambda: None)
    elif spawn.enter_binary() is None:
        if shutil.which("cc") is not None:
            pytest.fail("ironflow-enter is not built from this checkout's enter.c: run bash scripts/install")
        pytest.skip("no C compiler: no ironflow-enter")
    return way


async def _start(
    argv: list[str], group: cgroups.SandboxCgroup, *, gated: bool, binds: tuple[tuple[bytes, bytes], ...] = ()
) -> tuple[int, str, str]:
    """``argv`` started as a sandbox's first process (gated: as bubblewrap would be), and how it ended."""
    gate = spawn.Gate(b"") if gated else None
    try:
        proc = await spawn.start(
            argv,
            group=group,
            pairs=sandbox_limits.rlimits(LIMITS, nproc=False, data=False),
            host_uid=HOST_UID,
            binds=binds,
            env=launch.RUNTIME_ENV,
            pass_fds=() if gate is None else (gate.read_fd,),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
    finally:
        if gate is not None:
            gate.close()
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.parametrize(
    ("first_process", "gated"),
    [("entered", True), ("bash", True), ("bash", False)],
    ids=["gated-entered", "gated-bash", "between-fork-and-exec"],
    indirect=["first_process"],
)
async def test_the_first_process_starts_in_its_cgroup_with_its_rlimits_as_the_host_uid(
    first_process: str, gated: bool
) -> None:
    group = cgroups.SandboxCgroup(SUPPORT, LIMITS)
    name, hierarchies = os.path.basename(next(iter(group.dirs.values()))), len(group.dirs)
    try:
        code, out, err = await _start(["cat", "/proc/self/cgroup", "/proc/self/limits", "/proc/self/status"], group,
                                      gated=gated)  # fmt: skip
    finally:
        await group.remove()
    assert code == 0, err
    lines = out.splitlines()
    # One line per hierarchy the sandbox has a directory in (v1), or the one v2 line, names its cgroup.
    assert sum(line.endswith("/" + name) for line in lines) == hierarchies, out
    limits = {" ".join(line.split()[:3]): line.split()[3:5] for line in lines if line.startswith("Max ")}
    assert limits["Max open files"] == ["77", "77"]
    assert limits["Max file size"] == [str(5 << 20)] * 2
    uids = next(line for line in lines if line.startswith("Uid:")).split()[1:]
    assert uids == [str(HOST_UID)] * 4
    groups = next(line for line in lines if line.startswith("Groups:")).split()[1:]
    assert groups == []


@pytest.mark.parametrize("first_process", GATED, indirect=True)
async def test_a_gated_first_process_that_cannot_join_its_cgroup_runs_nothing(first_process: str) -> None:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as shown:
        os.chmod(shown, 0o777)  # noqa: S103 - the host uid could write the marker, were it ever run
        marker = os.path.join(shown, "ran")
        group = cgroups.SandboxCgroup(SUPPORT, LIMITS)
        dirs = dict(group.dirs)
        assert group.remove_now()  # gone before the start: joining it fails
        group.dirs = dirs  # the start still names it
        if first_process == "bash":  # killed at its gate: the start says so
            with pytest.raises(errors.SandboxError, match="could not put the sandbox in its cgroup"):
                await _start(["touch", marker], group, gated=True)
        else:  # ironflow-enter ends (125) before bubblewrap with its one line: the run's check says so
            code, _, err = await _start(["touch", marker], group, gated=True)
            assert code == 125
            assert err.startswith(spawn.ENTER_FAILED + "cannot join its cgroup: "), err
            with pytest.raises(errors.SandboxError, match="could not put the sandbox in its cgroup"):
                sandbox_argv.raise_if_sandbox_failed(code, err, "bwrap")
        assert not os.listdir(shown)


@pytest.mark.parametrize("first_process", ["entered", "bash"], ids=["entered", "between-fork-and-exec"], indirect=True)
async def test_sources_under_a_home_the_host_uid_cannot_enter_are_staged_for_it_and_only_for_it(
    first_process: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's interpreter lives under root's 0700 home: its first process binds it at a staged
    path under /tmp in a mount namespace of its own, as root, then drops; the host sees none of it.
    ironflow-enter does it in its one exec, with nothing run between fork and exec."""
    if first_process == "entered":
        monkeypatch.setattr(cgroups, "child_setup", None)  # called, it would fail the start
    with tempfile.TemporaryDirectory() as home:
        plan = _sources_under(home)
        staged = list(plan.values())
        on_host = _existing(staged)
        group = cgroups.SandboxCgroup(SUPPORT, LIMITS)
        try:
            code, out, err = await _start(
                ["sh", "-c", 'cat "$1/inside" "$2"; id -u; grep -c " /tmp " /proc/self/mountinfo', "sh", *staged],
                group,
                gated=True,
                binds=identity.binds(plan),
            )
        finally:
            await group.remove()
    assert code == 0, err
    assert out.splitlines()[:3] == ["a file in a staged directory", "a staged file", str(HOST_UID)]
    assert int(out.splitlines()[3]) >= 1  # its own tmpfs on /tmp
    assert _existing(staged) == on_host  # nothing made on the host's /tmp


def _sources_under(home: str) -> dict[str, str]:
    """A directory and a file under a 0700 ``home``, and where the start stages them."""
    os.chmod(home, 0o700)
    os.mkdir(os.path.join(home, "lib"))
    with open(os.path.join(home, "lib", "inside"), "w") as f:
        f.write("a file in a staged directory\n")
    with open(os.path.join(home, "python"), "w") as f:
        f.write("a staged file\n")
    return identity.stage_plan([os.path.join(home, "lib"), os.path.join(home, "python")])


def _existing(paths: list[str]) -> list[bool]:
    return [os.path.exists(path) for path in paths]
