"""The launcher with a container daemon's client as the sandbox's process: its container is read after
a normal end and removed on every path (a killed client leaves it running), with a recording stand-in
for the daemon and real processes for the client."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from ironflow.local.sandbox import cgroups, launch
from ironflow.local.sandbox.limits import DEFAULT_LIMITS


class Daemon:
    """Names every sandbox ``c1`` and records what is asked of it."""

    def __init__(self, *, oom: bool = False) -> None:
        self.oom = oom
        self.asked: list[tuple[str, str]] = []

    @property
    def env(self) -> Mapping[str, str]:
        return dict(launch.RUNTIME_ENV)

    def container_in(self, argv: list[str]) -> str | None:
        return "c1"

    async def memory_killed(self, name: str) -> bool:
        self.asked.append(("inspect", name))
        return self.oom

    async def remove(self, name: str) -> None:
        self.asked.append(("rm", name))


def _processes(daemon: Daemon) -> launch.SandboxProcesses:
    return launch.SandboxProcesses(cgroups.Support(0), DEFAULT_LIMITS, host_uid=None, containers=daemon)


@pytest.mark.parametrize("oom", [False, True])
async def test_an_ended_client_has_its_container_read_then_removed(oom: bool) -> None:
    daemon = Daemon(oom=oom)
    finished = await _processes(daemon).run(["sh", "-c", "echo out; exit 137"], stdin=None, limit_s=10, sink=None)
    assert (finished.code, finished.stdout, finished.memory_kills) == (137, b"out\n", int(oom))
    assert daemon.asked == [("inspect", "c1"), ("rm", "c1")]


async def test_a_client_past_its_time_has_its_container_removed() -> None:
    daemon = Daemon()
    finished = await _processes(daemon).run(["sleep", "30"], stdin=None, limit_s=0.5, sink=None)
    assert finished.timed_out
    assert daemon.asked == [("rm", "c1")]


async def test_a_released_client_has_its_container_removed_before_release_returns() -> None:
    daemon = Daemon()
    processes = _processes(daemon)
    running = processes.run(["sleep", "30"], stdin=None, limit_s=30, sink=None, run_ids=frozenset({"r"}))
    task = asyncio.create_task(running)
    await asyncio.sleep(0.3)  # the client runs
    assert await processes.kill_run("r") == 1
    assert ("rm", "c1") in daemon.asked  # gone before kill_run returned
    assert (await task).code != 0
