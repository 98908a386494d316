"""A sandbox's first process starts in its cgroup, with its rlimits, as the host uid (real ironflow-enter,
bash, setpriv, cgroups): what it reads of itself as it starts shows all three, whether a root worker's
gated start put it there (``ironflow-enter``, or without it bash, which joins by itself, then waits at its
gate) or it set itself up between fork and exec; a gated start whose first process cannot join its cgroup
runs nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from ironflow import errors
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import cgroups, identity, launch, spawn
from ironflow.local.sandbox import limits as sandbox_limits
from ironflow.testing.polling import eventually_sync
from ironflow.testing.processes import argv_of, running

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
        return way
    if spawn.enter_binary() is None:
        if shutil.which("cc") is not None:
            pytest.fail("ironflow-enter is not built from this checkout's enter.c: run bash scripts/install")
        pytest.skip("no C compiler: no ironflow-enter")
    monkeypatch.setattr(cgroups, "child_setup", None)  # called, it would fail the start: nothing between fork and exec
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
    [("entered", True), ("bash", True), ("entered", False), ("bash", False)],
    ids=["gated-entered", "gated-bash", "ungated-entered", "between-fork-and-exec"],
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
    first_process: str,
) -> None:
    """A session's interpreter lives under root's 0700 home: its first process binds it at a staged
    path under /tmp in a mount namespace of its own, as root, then drops; the host sees none of it.
    ironflow-enter does it in its one exec, with nothing run between fork and exec."""
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


#: A worker that starts ``sleep`` as a sandbox's first process (no gate: as runsc starts), says its pid
#: once it runs, and waits: argv ``WAY HOST_UID|- DIE``.
_WORKER = """
import asyncio, sys
from ironflow.local.sandbox import cgroups, launch, spawn
way, uid, die = sys.argv[1], sys.argv[2], sys.argv[3] == "die"
if way == "bash":
    spawn.enter_binary = lambda: None
else:
    cgroups.child_setup = None  # called, it would fail the start

async def main():
    proc = await spawn.start(
        ["sleep", "300"], group=None, pairs=((7, 99),), host_uid=None if uid == "-" else int(uid), binds=(),
        env=launch.RUNTIME_ENV, pass_fds=(), stdin=-3, stdout=-3, stderr=-3, die_with_parent=die,
    )
    print(proc.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.mark.parametrize("first_process", ["entered", "bash"], ids=["entered", "between-fork-and-exec"], indirect=True)
@pytest.mark.parametrize("uid", [str(HOST_UID), "-"], ids=["root-worker", "own-uid"])
@pytest.mark.parametrize("die", [True, False], ids=["dies-with-it", "outlives-it"])
def test_an_ungated_first_process_dies_with_its_worker_when_asked(first_process: str, uid: str, die: bool) -> None:
    """runsc has no --die-with-parent: its first process asks for SIGKILL once the worker dies (after its
    uid drop, which would clear it); asked for nothing, it outlives a killed worker (the control)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", _WORKER, first_process, uid, "die" if die else "live"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, env=env) as worker:
        assert worker.stdout is not None
        pid = int(worker.stdout.readline())
        try:
            eventually_sync(lambda: argv_of(pid) == ["sleep", "300"], limit_s=10, interval_s=0.01, what="sleep")
            with open(f"/proc/{pid}/limits") as f:
                assert any(line.startswith("Max open files") and "99" in line for line in f)
            with open(f"/proc/{pid}/status") as f:
                uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
            assert uids == [str(HOST_UID) if uid != "-" else str(os.getuid())] * 4
            worker.kill()
            worker.wait()
            if die:
                eventually_sync(lambda: not running(pid), limit_s=10, interval_s=0.01, what="sleep killed")
            else:
                time.sleep(0.3)
                assert running(pid)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_ironflow_enter_refuses_a_parent_it_does_not_have() -> None:
    """Its parent gone before it asked (no signal would ever come): it ends before the program ran."""
    enter = spawn.enter_binary()
    if enter is None:
        pytest.skip("no ironflow-enter built from this checkout")
    done = subprocess.run([enter, "0", "0", "0", "-", "-", "1", "--", "true"], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (125, spawn.ENTER_FAILED + "its parent is gone\n")
    kept = subprocess.run([enter, "0", "0", "0", "-", "-", str(os.getpid()), "--", "true"], capture_output=True)
    assert kept.returncode == 0, kept.stderr


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
