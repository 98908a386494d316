"""The sandbox session contract, on every backend (``cases.BACKENDS``): local bubblewrap, gVisor and Docker,
Kubernetes on the test server and on the real kube-apiserver with kwok, agent-sandbox with
the stand-in controller and with the real one. One handle:
commands one after another, streams, background commands, confined files, tar copies, reattach
by id, close and close-run, TTL and idle timeout, and nothing left of a session once it ends."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.sessions.integration.cases import BACKENDS, SessionCase, open_case

from ironflow import errors
from ironflow.sessions import Exit, OpenOptions, Output, SessionNotFound
from ironflow.testing.polling import eventually

pytestmark = pytest.mark.bwrap


@pytest.fixture(params=BACKENDS)
async def case(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionCase]:
    async with open_case(request, request.param, tmp_path) as opened:
        yield opened


async def test_commands_run_one_after_another_in_the_same_sandbox(case: SessionCase) -> None:
    async with await case.open(OpenOptions(ttl=60, env=case.env)) as sandbox:
        first = await sandbox.commands.run(["sh", "-c", "echo kept > note; pwd"])
        assert (first.exit_code, first.stdout.strip()) == (0, case.work_dir)
        assert (await sandbox.commands.run("cat note")).stdout == "kept\n"
        env = await sandbox.commands.run(["sh", "-c", "echo $A$B; cat"], env={"A": "1"}, stdin="in", cwd=".")
        assert env.stdout == "1" + case.env.get("B", "") + "\nin"
        failed = await sandbox.commands.run(["sh", "-c", "exit 7"])
        assert (failed.exit_code, failed.timed_out) == (7, False)
        assert (await sandbox.commands.run("no-such-tool")).exit_code == 127
        started = time.monotonic()
        slow = await sandbox.commands.run(["sh", "-c", "sleep 30.017 & exec sleep 31.017"], timeout=0.5)
        assert slow.timed_out
        assert time.monotonic() - started < 10
        left = await sandbox.commands.run(["sh", "-c", "ps -eo args | grep -c '^sleep 3[01].017$' || true"])
        assert left.stdout.strip() == "0"  # the timeout killed the command's whole process group


async def test_streaming_callbacks_and_background_commands(case: SessionCase) -> None:
    async with await case.open(OpenOptions(ttl=60)) as sandbox:
        events = [e async for e in sandbox.commands.stream(["sh", "-c", "echo a; echo b >&2; exit 2"])]
        assert Output("stdout", "a\n") in events
        assert Output("stderr", "b\n") in events
        assert events[-1] == Exit(2, False)
        seen: list[str] = []
        await sandbox.commands.run(["echo", "hi"], on_stdout=seen.append)
        assert seen == ["hi\n"]
        done = await sandbox.commands.start(["sh", "-c", "sleep 0.2; echo late"])
        assert (await done.wait()).stdout == "late\n"
        forever = await sandbox.commands.start(["sleep", "60"])
        assert await forever.kill() is True  # at once: a kill is not lost in the command's first moments
        assert (await forever.wait()).exit_code == 137
        limited = await sandbox.commands.start(["sleep", "60"])
        assert (await limited.wait(timeout=0.5)).timed_out


async def test_files_and_directories_move_in_and_out_confined(case: SessionCase, tmp_path: Path) -> None:
    async with await case.open(OpenOptions(ttl=60)) as sandbox:
        assert await sandbox.files.write("d/e/f.txt", "hello") == 5
        assert await sandbox.files.read("d/e/f.txt") == b"hello"
        assert [(e.name, e.type) for e in await sandbox.files.list("d")] == [("e", "directory")]
        assert await sandbox.files.exists("d/e/f.txt")
        assert not await sandbox.files.exists("nope")
        await sandbox.files.mkdir("empty")
        await sandbox.files.remove("d", recursive=True)
        assert not await sandbox.files.exists("d")
        with pytest.raises(FileNotFoundError):
            await sandbox.files.read("d/e/f.txt")
        for bad in ("../../etc/passwd", "/etc/passwd"):
            with pytest.raises(PermissionError):
                await sandbox.files.read(bad)
        await sandbox.commands.run(["ln", "-s", "/etc", "link"])
        with pytest.raises(PermissionError):
            await sandbox.files.read("link/hostname")
        source = tmp_path / "tree"
        (source / "sub").mkdir(parents=True)
        (source / "sub" / "x.txt").write_text("x")
        assert await sandbox.files.upload_dir(str(source), "copied") >= 3
        assert (await sandbox.commands.run("cat copied/sub/x.txt")).stdout == "x"
        back = tmp_path / "back"
        await sandbox.files.download_dir("copied", str(back))
        assert list((back / "sub").iterdir()) == [back / "sub" / "x.txt"]
        with pytest.raises(errors.ConfigError):
            await sandbox.files.download_dir("copied", str(tmp_path / "small"), max_bytes=100)


async def test_a_large_write_refused_before_its_body_is_read_still_says_why(case: SessionCase) -> None:
    """The runtime refuses the path before it reads the body. Over exec (a Kubernetes session) the
    pod reads the rest all the same: an exec that ends with its stdin unread may lose its answer on
    the way (the real API server closed the stream), and the refusal read as a pod that did not
    answer. The body is more than the way holds: a 2 MiB one was all taken before the pod ended."""
    async with await case.open(OpenOptions(ttl=60)) as sandbox:
        for _ in range(3):
            with pytest.raises(PermissionError):
                await sandbox.files.write("../../outside", b"x" * (32 << 20))
        assert await sandbox.files.write("inside", b"y") == 1


async def test_close_and_close_run_leave_nothing(case: SessionCase) -> None:
    one = await case.open(OpenOptions(ttl=60, labels={"team": "a"}, run_id="run-1"))
    # On the Kubernetes stand-ins each exec runs on this host and no container dies with the pod:
    # there the command ends by itself, so it outlives no test (local's `leftovers` checks pids).
    nap = "300" if case.backend.startswith("local") else "1"
    await one.commands.start(["sh", "-c", f"sleep {nap} & sleep {nap}"])
    two = await case.open(OpenOptions(ttl=60, run_id="run-1"))
    other = await case.open(OpenOptions(ttl=60, run_id="run-2"))
    assert {i.id: i.labels for i in case.listed()} == {one.id: {"team": "a"}, two.id: {}, other.id: {}}
    assert await case.sessions.release_run("run-1") == 2
    assert [i.id for i in case.listed()] == [other.id]
    await other.close()
    await eventually(case.nothing_left, interval_s=0.1, what="nothing of the sessions left")
    assert case.listed() == []
    with pytest.raises(SessionNotFound):
        await case.connect(one.id)
    await one.close()  # twice is no error
    for handle in (one, two):
        await handle.disconnect()


async def test_a_session_ends_at_its_ttl_and_when_idle(case: SessionCase) -> None:
    short = await case.open(OpenOptions(ttl=0.5))
    idle = await case.open(OpenOptions(ttl=60, idle_timeout=0.5))
    await idle.commands.run("true")
    await eventually(lambda: case.listed() == [], interval_s=0.1, what="both sessions to end")
    await eventually(case.nothing_left, interval_s=0.1, what="nothing of them left")
    for handle in (short, idle):
        await handle.disconnect()


async def test_a_handle_reattaches_by_id(case: SessionCase) -> None:
    sandbox = await case.open(OpenOptions(ttl=60))
    await sandbox.files.write("x", "1")
    await sandbox.disconnect()
    again = await case.connect(sandbox.id)
    assert await again.files.read("x") == b"1"
    await again.close()
    await eventually(case.nothing_left, interval_s=0.1, what="nothing left")
