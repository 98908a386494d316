"""A session directory's watch under real bubblewrap: create, write, rename and remove seen in order,
a tree's new directories followed, a symlink swapped in or a directory moved out reveals nothing
outside, a slow client's overflow said, a path outside the workspace refused; and ``ironflow sandbox
watch`` through a real ``sandbox serve``, lines as they come and one ``error:`` line with exit 2."""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable

import pytest
from tests.sessions.integration.serving import CLI, Served, ironflow

from ironflow import errors
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import AsyncSandbox, OpenOptions, WatchEvent

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

WAIT_S = 20.0


@pytest.fixture
async def sandbox(local_sessions: LocalSessions) -> AsyncIterator[AsyncSandbox]:
    async with await local_sessions.open(OpenOptions(ttl=120)) as opened:
        yield opened


class Watched:
    """The events of one watch, gathered by a task; ``paused`` holds the reader back (a slow client)."""

    def __init__(self, sandbox: AsyncSandbox, path: str, **options: object) -> None:
        self.sandbox, self.events = sandbox, list[WatchEvent]()
        self.paused = asyncio.Event()
        self.paused.set()
        self.changed = asyncio.Event()
        self.task = asyncio.create_task(self._gather(path, options))

    async def _gather(self, path: str, options: dict[str, object]) -> None:
        async with contextlib.aclosing(self.sandbox.files.watch(path, **options)) as events:  # type: ignore[arg-type]
            async for event in events:
                await self.paused.wait()
                self.events.append(event)
                self.changed.set()

    async def until(self, found: Callable[[WatchEvent], bool]) -> WatchEvent:
        async with asyncio.timeout(WAIT_S):
            while True:
                if (hit := next((e for e in self.events if found(e)), None)) is not None:
                    return hit
                if self.task.done():
                    self.task.result()
                    raise AssertionError(f"the watch ended: {self.events}")
                self.changed.clear()
                await self.changed.wait()

    async def ready(self, marker: str = ".ready") -> None:
        """Touch a new ``marker``-N until its create is seen: the runtime's watches are in place."""
        async with asyncio.timeout(WAIT_S):
            for n in range(100):
                await self.sandbox.commands.run(["touch", f"{marker}{n}"])
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await self.until(lambda e: e.type == "create" and marker.rpartition("/")[2] in e.name)
                        return

    def after(self, marker: str = ".ready") -> list[tuple[str, str, str | None]]:
        names = [(e.type, e.name, e.old_name) for e in self.events if marker not in e.name and ".ready" not in e.name]
        return [n for i, n in enumerate(names) if n[0] != "write" or names[i - 1 : i] != [n]]  # a burst is one

    async def aclose(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def _run(sandbox: AsyncSandbox, script: str) -> None:
    done = await sandbox.commands.run(["sh", "-c", script], timeout=60)
    assert done.exit_code == 0, done.stderr


async def test_create_write_rename_remove_are_seen_in_order(sandbox: AsyncSandbox) -> None:
    await sandbox.files.mkdir("w")
    watched = Watched(sandbox, "w")
    try:
        await watched.ready("w/.ready")
        await _run(sandbox, "cd w && echo a > f && echo b >> f && mv f g && mkdir sub && rm g && rmdir sub")
        await watched.until(lambda e: e.name == "sub" and e.type == "remove")
        assert watched.after() == [
            ("create", "f", None),
            ("write", "f", None),
            ("rename", "g", "f"),
            ("create", "sub", None),
            ("remove", "g", None),
            ("remove", "sub", None),
        ]
        assert next(e for e in watched.events if e.name == "sub").is_dir
    finally:
        await watched.aclose()


async def test_a_recursive_watch_follows_new_directories_and_their_renames(sandbox: AsyncSandbox) -> None:
    watched = Watched(sandbox, ".", recursive=True)
    try:
        await watched.ready()
        await _run(sandbox, "mkdir -p a")
        await watched.until(lambda e: e.name == "a" and e.type == "create")
        await _run(sandbox, "echo x > a/file && mv a b && echo y > b/other")
        await watched.until(lambda e: e.name == "b/other" and e.type == "write")
        assert watched.after() == [
            ("create", "a", None),
            ("create", "a/file", None),
            ("write", "a/file", None),
            ("rename", "b", "a"),
            ("create", "b/other", None),
            ("write", "b/other", None),
        ]
    finally:
        await watched.aclose()


async def test_a_symlink_swapped_in_or_a_directory_moved_out_reveals_nothing_outside(sandbox: AsyncSandbox) -> None:
    """``outside`` is beside the watched ``w`` on the same file system: a move there is a rename, and the
    moved directory keeps its inotify watch unless the runtime drops it."""
    await _run(sandbox, "mkdir -p w/d w/e outside")
    watched = Watched(sandbox, "w", recursive=True)
    try:
        await watched.ready("w/.ready")
        await _run(
            sandbox,
            "rmdir w/d && ln -s ../outside w/d && touch w/d/secret-through-link outside/secret-beside"
            " && mv w/e outside/e && touch outside/e/secret-moved-out && mkdir outside/e/secret-dir"
            " && echo x > outside/e/secret-dir/secret-deeper && touch w/.done",
        )
        await watched.until(lambda e: e.name == ".done")
        assert not [e for e in watched.events if "secret" in e.name or "outside" in e.name], watched.events
        assert watched.after(".done") == [("remove", "d", None), ("create", "d", None), ("remove", "e", None)]
        assert not next(e for e in watched.events if e.type == "create" and e.name == "d").is_dir  # the link itself
    finally:
        await watched.aclose()


async def test_a_slow_client_gets_an_overflow_event_then_the_events_after_it(sandbox: AsyncSandbox) -> None:
    watched = Watched(sandbox, ".", max_events=16)
    try:
        await watched.ready()
        watched.paused.clear()  # the client reads nothing: the socket fills, then the runtime's queue
        await _run(sandbox, "seq -f f%g 1 30000 | xargs touch && seq -f f%g 1 30000 | xargs rm")
        await asyncio.sleep(1.0)
        watched.paused.set()
        overflow = await watched.until(lambda e: e.type == "overflow")  # the backlog was sent: room again
        assert overflow.dropped is None or overflow.dropped > 0  # None: the kernel's queue overflowed too
        kept = [e for e in watched.events if e.type == "create" and e.name.startswith("f")]
        assert 0 < len(kept) < 30000
        # The runtime may still be draining the backlog, and dropping what comes meanwhile (another
        # overflow event says so): a new marker until one is seen, as at the start.
        await watched.ready(".after")
        names = [e.name or e.type for e in watched.events]
        assert names.index("overflow") < next(i for i, name in enumerate(names) if name.startswith(".after"))
    finally:
        await watched.aclose()


async def test_a_path_outside_the_workspace_or_no_directory_is_refused(sandbox: AsyncSandbox) -> None:
    await _run(sandbox, "ln -s /tmp out && touch plain")
    for path in ("..", "/etc", "out"):
        with pytest.raises(PermissionError):
            await anext(aiter(sandbox.files.watch(path)))
    with pytest.raises(FileNotFoundError):
        await anext(aiter(sandbox.files.watch("plain")))


async def test_at_most_16_watches_at_once_and_a_client_that_goes_frees_its_own(sandbox: AsyncSandbox) -> None:
    await sandbox.files.mkdir("w")
    held = [Watched(sandbox, "w") for _ in range(16)]
    try:
        for n, watched in enumerate(held):
            await watched.ready(f"w/.ready-{n}-")
        with pytest.raises(errors.ConfigError, match="16 watches are open in this session already"):
            await anext(aiter(sandbox.files.watch("w")))
        for watched in held[:4]:  # their connections close: the runtime sees each go within a second
            await watched.aclose()
        async with asyncio.timeout(WAIT_S):
            while True:
                try:
                    again = Watched(sandbox, "w")
                    await again.ready("w/.again-")
                    break
                except errors.ConfigError:
                    await asyncio.sleep(0.2)
        held.append(again)
    finally:
        for watched in held:
            await watched.aclose()


async def test_a_watch_ends_when_its_session_closes(local_sessions: LocalSessions) -> None:
    sandbox = await local_sessions.open(OpenOptions(ttl=60))
    watched = Watched(sandbox, ".")
    await watched.ready()
    await local_sessions.close(sandbox.id)
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(errors.SandboxError):
            await watched.task
    await sandbox.disconnect()


def test_the_cli_prints_a_line_per_event_and_refuses_outside_in_one_line(served: Served) -> None:
    sandbox_id = ironflow("sandbox", "open", "--ttl", "5m", env=served.env).stdout.strip()
    watcher = subprocess.Popen(
        [*CLI, "sandbox", "watch", sandbox_id, ".", "-o", "json"],
        env=served.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        line = ""
        for i in range(40):  # until the watch is in place: a new name each time
            assert ironflow("sandbox", "exec", sandbox_id, "--", "touch", f"m{i}", env=served.env).returncode == 0
            if select.select([watcher.stdout], [], [], 0.5)[0]:
                line = watcher.stdout.readline()
                break
        assert json.loads(line) == {"type": "create", "name": f"m{i}", "is_dir": False}
    finally:
        watcher.terminate()
        watcher.communicate(timeout=30)
    done = ironflow("sandbox", "watch", sandbox_id, "..", env=served.env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == ["error: cannot watch '..': it leaves the session's workspace"]
    assert done.stdout == ""
