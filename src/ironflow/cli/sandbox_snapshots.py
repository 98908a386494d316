"""``ironflow sandbox snapshot|snapshots|fork|pause|unpause|extend``: a session's files and life.

Clients of ``ironflow sandbox serve`` as the other session commands are
(:mod:`ironflow.cli.sandbox_sessions`): ``snapshot ID [--name N]`` keeps the session's files in
the server's snapshot store and prints the snapshot's id, ``snapshot rm SNAPSHOT`` deletes one,
``snapshots`` lists them, ``fork ID [--count N]`` opens sessions from one snapshot of it (their
ids, a line each; ``sandbox open --from SNAPSHOT`` opens one from a kept snapshot), ``pause`` and
``unpause`` freeze and thaw a session (``resume`` is agent-sandbox's ``operatingMode``, as
``suspend``: docker's words are taken here; on agent-sandbox ``pause`` removes the pod and keeps
its home's PVC, on k8s it keeps the workspace in this machine's store and removes the pod),
``extend ID --ttl 30m`` moves its expiry. A cluster's sessions (``--provider``) snapshot and fork
their workspace, kept in this machine's store; a backend without a command is refused in one
line, exit 2.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer

from ironflow import errors
from ironflow.cli import exits, tables
from ironflow.cli.formats import OutputFormat, ResultFormat, document
from ironflow.cli.session_backends import BackendOption, ProviderOption, ServerOption, Target, choose, session_client
from ironflow.cli.stores import run_async
from ironflow.sessions.backend import (
    PauseControls,
    SessionBackend,
    SessionControls,
    SessionSnapshots,
    controls_of,
    pause_controls_of,
    snapshots_of,
)
from ironflow.sessions.values import SessionInfo, SnapshotInfo, check_session_id, check_snapshot_id, parse_duration

__all__ = ["register"]

T = TypeVar("T")

IdArgument = Annotated[str, typer.Argument(metavar="ID", help="The session's id.", show_default=False)]
InfoOutput = Annotated[ResultFormat, typer.Option("--output", "-o", help="text, json or yaml.")]


def _run(target: Target, action: Callable[[SessionBackend], Awaitable[T]]) -> T:
    """``action`` on the sessions; every error one line with its exit code."""
    choose(target)

    async def go() -> T:
        async with session_client(target) as sessions:
            return await action(sessions)

    try:
        return run_async(go())
    except errors.IronflowError as exc:
        exits.fail_for(exc)


def _call(target: Target, action: Callable[[SessionControls], Awaitable[T]]) -> T:
    """``action`` on sessions that extend (refused in one line where they do not)."""
    return _run(target, lambda sessions: action(controls_of(sessions)))


def _paused(target: Target, action: Callable[[PauseControls], Awaitable[T]]) -> T:
    """``action`` on sessions that pause (a server's, or agent-sandbox's by ``--provider``)."""
    return _run(target, lambda sessions: action(pause_controls_of(sessions)))


def _kept(target: Target, action: Callable[[SessionSnapshots], Awaitable[T]]) -> T:
    """``action`` on sessions that snapshot and fork (every backend's)."""
    return _run(target, lambda sessions: action(snapshots_of(sessions)))


def _checked(check: Callable[[str], str], value: str) -> str:
    try:
        return check(value)
    except errors.ConfigError as exc:
        exits.fail_for(exc)


def _print_info(info: SessionInfo, done: str, output: ResultFormat) -> None:
    print(f"{info.id} {done}" if output is ResultFormat.TEXT else document(info.to_json(), output))


def snapshot(
    sandbox_id: Annotated[
        str, typer.Argument(metavar="ID|rm", help="The session's id (or rm SNAPSHOT).", show_default=False)
    ],
    removed: Annotated[
        str | None, typer.Argument(metavar="SNAPSHOT", help="With rm: the snapshot to delete.", show_default=False)
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="A name shown by `snapshots`.")] = None,
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    output: InfoOutput = ResultFormat.TEXT,
) -> None:
    """Keep a session's files as a snapshot and print its id; `snapshot rm SNAPSHOT` deletes one."""
    target = Target(server, backend, provider)
    if sandbox_id == "rm":
        if removed is None or name is not None:
            exits.fail("usage: ironflow sandbox snapshot rm SNAPSHOT")
        snapshot_id = _checked(check_snapshot_id, removed)
        if not _kept(target, lambda s: s.remove_snapshot(snapshot_id)):
            exits.fail(f"no snapshot '{snapshot_id}': `ironflow sandbox snapshots` lists them")
        typer.echo(f"removed {snapshot_id}")
        return
    if removed is not None:
        exits.fail("one session at a time: ironflow sandbox snapshot ID [--name N]")
    session_id = _checked(check_session_id, sandbox_id)
    info = _kept(target, lambda s: s.snapshot(session_id, name=name))
    print(info.id if output is ResultFormat.TEXT else document(info.to_json(), output))


def _size(n: int) -> str:
    if n < 1024:
        return f"{n}B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f}{unit}"


def list_snapshots(
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")] = OutputFormat.TABLE,
) -> None:
    """List the snapshots of the server's store: id, name, session, size, age."""
    found: list[SnapshotInfo] = _kept(Target(server, backend, provider), lambda s: s.snapshots())
    if output is not OutputFormat.TABLE:
        print(document([info.to_json() for info in found], output))
        return
    table = tables.new("ID", "NAME", "SESSION", "SIZE", "CREATED", "HOLDS")
    for info in found:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.created_at))
        table.add_row(info.id, info.name or "-", info.session_id, _size(info.size_bytes), created, ",".join(info.trees))
    print(tables.render(table, width=tables.stdout_width()))


def fork(
    sandbox_id: IdArgument,
    count: Annotated[int, typer.Option("--count", help="How many sessions to open.", min=1, max=100)] = 1,
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    output: InfoOutput = ResultFormat.TEXT,
) -> None:
    """Open sessions that start with a snapshot of this one's files; print their ids."""
    session_id = _checked(check_session_id, sandbox_id)

    async def go(sessions: SessionSnapshots) -> list[SessionInfo]:
        handles = await sessions.fork(session_id, count=count)
        for handle in handles:
            await handle.disconnect()
        return [handle.info for handle in handles]

    infos = _kept(Target(server, backend, provider), go)
    if output is ResultFormat.TEXT:
        print("\n".join(info.id for info in infos))
    else:
        print(document([info.to_json() for info in infos], output))


def pause(
    sandbox_id: IdArgument,
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    output: InfoOutput = ResultFormat.TEXT,
) -> None:
    """Pause a session: locally its processes freeze; on Kubernetes its pod goes and its HOME is kept
    (k8s: an archive; agent-sandbox: home_volume). Its next request, or unpause, resumes it."""
    session_id = _checked(check_session_id, sandbox_id)
    _print_info(_paused(Target(server, backend, provider), lambda s: s.pause(session_id)), "paused", output)


def unpause(
    sandbox_id: IdArgument,
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    output: InfoOutput = ResultFormat.TEXT,
) -> None:
    """Let a paused session run again."""
    session_id = _checked(check_session_id, sandbox_id)
    _print_info(_paused(Target(server, backend, provider), lambda s: s.resume(session_id)), "running", output)


def extend(
    sandbox_id: IdArgument,
    ttl: Annotated[str, typer.Option("--ttl", help="The session ends this long from now, e.g. 30m, 2h.")],
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    output: InfoOutput = ResultFormat.TEXT,
) -> None:
    """Move a session's expiry: it now ends --ttl from now."""
    session_id = _checked(check_session_id, sandbox_id)
    seconds = _checked(lambda text: str(parse_duration(text)), ttl)
    info = _call(Target(server, backend, provider), lambda s: s.extend(session_id, float(seconds)))
    _print_info(info, time.strftime("expires at %H:%M:%S", time.localtime(info.expires_at)), output)


def register(group: typer.Typer) -> None:
    """Add the snapshot and lifetime commands to the ``ironflow sandbox`` group."""
    group.command("snapshot")(snapshot)
    group.command("snapshots")(list_snapshots)
    group.command("fork")(fork)
    group.command("pause")(pause)
    group.command("unpause")(unpause)
    group.command("extend")(extend)
