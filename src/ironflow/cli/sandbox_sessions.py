"""``ironflow sandbox open|exec|cp|ls|close``: sandbox sessions from the shell.

A local session lives in the process that opened it, so ``serve``
(:mod:`ironflow.cli.sandbox_serve`) runs that process and every command here is its client
(:class:`~ironflow.sessions.remote.RemoteSessions`): ``--server`` defaults to
``$IRONFLOW_SANDBOX_SERVER``, the token to ``$IRONFLOW_SANDBOX_TOKEN`` or the file ``serve``
wrote. A Kubernetes session is its pod: with ``--provider FILE`` these commands talk to the
file's cluster and need no server (:mod:`ironflow.cli.session_backends`). A token is never an
option (it would be on the argv) and never printed. Bad input exits 2 with one line, an
unreachable server or cluster 3 (:mod:`ironflow.cli.exits`); ``exec`` exits with the
command's code, and 1 when it timed out, as ``ironflow exec`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import secrets
import stat
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Final, TypeVar

import typer

from ironflow import errors
from ironflow.cli import egress_options as egress_cli
from ironflow.cli import exits, inputs, session_exec, shared_options, tables
from ironflow.cli.formats import OutputFormat, ResultFormat, TerminalStream, document, printable
from ironflow.cli.session_backends import (
    BackendOption,
    Mode,
    ProviderOption,
    ServerOption,
    Target,
    choose,
    session_client,
)
from ironflow.cli.stores import run_async
from ironflow.sessions.backend import SessionBackend
from ironflow.sessions.client import AsyncFiles
from ironflow.sessions.values import (
    SESSION_ID,
    OpenOptions,
    Output,
    SessionInfo,
    check_snapshot_id,
    parse_duration,
)
from ironflow.workspaces import Workspace, WorkspaceChanges, is_git_source

__all__ = ["parse_remote", "register"]

T = TypeVar("T")

_NEW_FILE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: The idle timeout of a session a server holds, unless ``--idle-timeout`` says otherwise.
_DEFAULT_IDLE: Final = "5m"


def parse_remote(text: str) -> tuple[str, str] | None:
    """``(id, path)`` of ``sbx-…:PATH`` (an empty path is the workspace), else None (pure)."""
    session_id, sep, path = text.partition(":")
    if sep and SESSION_ID.match(session_id):
        return session_id, path or "."
    return None


def _call(target: Target, action: Callable[[SessionBackend], Awaitable[T]]) -> T:
    """Run ``action`` against the server or the cluster; every error is one line with its exit code."""
    choose(target)  # a bad combination exits 2 before anything is reached

    async def go() -> T:
        async with session_client(target) as sessions:
            return await action(sessions)

    try:
        return run_async(go())
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    except (FileNotFoundError, PermissionError) as exc:  # the runtime's 404 and 403 on a path
        exits.fail(str(exc))


def open_session(
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    ttl: Annotated[str, typer.Option("--ttl", help="Longest life, e.g. 90s, 30m, 2h.")] = "30m",
    idle_timeout: Annotated[
        str | None,
        typer.Option(
            "--idle-timeout", help="Ends after this long with no request (a server's: 5m).", show_default=False
        ),
    ] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="KEY=VALUE, repeatable.")] = None,
    workspace: Annotated[
        str | None,
        typer.Option(
            "--workspace",
            metavar="DIR|GIT_URL[@REF]",
            help="A private copy of DIR (local sessions) or a clone of GIT_URL (any backend), the commands' "
            "working directory; `sandbox diff` gives its patch.",
            show_default=False,
        ),
    ] = None,
    from_snapshot: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="SNAPSHOT",
            help="Start with a snapshot's files (`sandbox snapshots`).",
            show_default=False,
        ),
    ] = None,
    idle_suspend: Annotated[
        str | None,
        typer.Option(
            "--idle-suspend", help="Pause after this long with no request; the next one resumes it.", show_default=False
        ),
    ] = None,
    output: Annotated[
        ResultFormat, typer.Option("--output", "-o", help="text (the id), json or yaml (the session).")
    ] = ResultFormat.TEXT,
    allow_host: shared_options.AllowHostOption = None,
    egress_profile: shared_options.EgressProfileOption = None,
    egress_file: shared_options.EgressFileOption = None,
) -> None:
    """Open a sandbox session and print it (-o json: its id, expiry, labels)."""
    target = Target(server, backend, provider)
    mode = choose(target)
    policy = egress_cli.command_policy(allow_host, egress_profile, egress_file)
    if mode is Mode.CLUSTER and workspace is not None and is_git_source(workspace):
        from ironflow.cli import workspace as ws  # the host's token, from the environment, for the proxy

        target.git_hosts = ws.git_hosts(ws.workspace(workspace, patch=None, apply=False, push=None, pods=True))
    if mode is Mode.CLUSTER and idle_timeout is not None:
        exits.fail("--idle-timeout needs a server to watch the session: use --server, or rely on --ttl")
    if workspace is not None and not is_git_source(workspace):
        if mode is Mode.CLUSTER or backend not in (None, "local"):
            exits.fail(
                f"--workspace '{workspace}': a cluster session's pod cannot see this machine's directories; "
                "give GIT_URL[@REF]"
            )
        if not Path(workspace).is_dir():
            exits.fail(f"--workspace '{workspace}' is not a directory")
    if mode is Mode.CLUSTER and idle_suspend:
        exits.fail("--idle-suspend needs a server to hold the session: use --server (a `sandbox serve`)")
    try:
        ttl_s = parse_duration(ttl)
        # --idle-suspend pauses what --idle-timeout would end: no default idle timeout with it
        idle = idle_timeout or (_DEFAULT_IDLE if mode is Mode.SERVER and idle_suspend is None else None)
        idle_s = None if idle is None else parse_duration(idle)
        suspend_s = None if idle_suspend is None else parse_duration(idle_suspend)
        if from_snapshot is not None:
            check_snapshot_id(from_snapshot)
    except errors.ConfigError as exc:
        exits.fail_for(exc)
    if from_snapshot is not None and workspace is not None:
        exits.fail("--from and --workspace: a session starts from a snapshot or a workspace, not both")
    session_labels = inputs.parse_pairs(label, "--label")

    async def go(sessions: SessionBackend) -> SessionInfo:
        spec = None if workspace is None else Workspace.parse(workspace)
        options = OpenOptions(
            ttl=ttl_s, idle_timeout=idle_s, labels=session_labels, workspace=spec, egress=policy,
            idle_suspend=suspend_s, from_snapshot=from_snapshot,
        )  # fmt: skip
        sandbox = await sessions.open(options)
        await sandbox.disconnect()
        return sandbox.info

    info = _call(target, go)
    print(info.id if output is ResultFormat.TEXT else document(info.to_json(), output))


def exec_in(
    ctx: typer.Context,
    sandbox_id: Annotated[str, typer.Argument(metavar="ID", help="The session's id.", show_default=False)],
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds before the command is killed.")] = None,
    cwd: Annotated[str | None, typer.Option("--cwd", help="Working directory, in the workspace.")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE, repeatable.")] = None,
    terminal: Annotated[
        bool, typer.Option("--tty", "-t", help="In a terminal: ours goes raw, keys and resizes go through.")
    ] = False,
) -> None:
    """Run -- CMD ARGS… in an open session; stream its output and exit with its exit code."""
    target = Target(server, backend, provider)
    if not terminal and choose(target) is Mode.SERVER:
        session_exec.run(sandbox_id, list(ctx.args), server=server, timeout=timeout, cwd=cwd, env=env)
    session_exec.session_id(sandbox_id)
    if terminal:
        from ironflow.cli import sandbox_terminal  # termios and the loop only for -t

        sandbox_terminal.require_terminal()
    argv, variables = session_exec.checked(list(ctx.args), timeout, env)

    async def go(sessions: SessionBackend) -> tuple[int, bool]:
        sandbox = await sessions.connect(sandbox_id)
        try:
            if terminal:
                return await sandbox_terminal.attach(sandbox, argv, env=variables, cwd=cwd, timeout=timeout)
            handle = await sandbox.commands.start(argv, env=variables, cwd=cwd)
            try:
                async for event in handle.events(timeout):
                    if isinstance(event, Output):
                        session_exec.write_output(event.stream, event.text)
                    else:
                        return event.exit_code, event.timed_out
            except BaseException:  # Ctrl-C or a dropped stream: the command does not outlive the caller
                with contextlib.suppress(Exception):
                    await asyncio.shield(handle.kill())
                raise
            raise errors.SandboxError("the command's stream ended without its exit")
        finally:
            await sandbox.disconnect()

    code, timed_out = _call(target, go)
    session_exec.finish(code, timed_out, timeout, sandbox_id)


async def _kind(files: AsyncFiles, path: str) -> str | None:
    """``file``, ``directory`` or None: what ``path`` is in the sandbox."""
    parent, name = posixpath.split(posixpath.normpath(path))
    if name in ("", ".") or not await files.exists(path):
        return "directory" if name in ("", ".") else None
    for entry in await files.list(parent or "."):
        if entry.name == name:
            return entry.type
    return None


async def _upload(sessions: SessionBackend, source: Path, is_dir: bool, session_id: str, dest: str) -> str:
    sandbox = await sessions.connect(session_id)
    try:
        if is_dir:
            count = await sandbox.files.upload_dir(str(source), dest)
            return f"{source} -> {session_id}:{dest} ({count} entries)"
        if dest.endswith("/") or await _kind(sandbox.files, dest) == "directory":
            dest = posixpath.join(dest, source.name)
        with source.open("rb") as f:
            size = await sandbox.files.write(dest, f)
        return f"{source} -> {session_id}:{dest} ({size} bytes)"
    finally:
        await sandbox.disconnect()


async def _download(sessions: SessionBackend, session_id: str, path: str, dest: Path, into: bool) -> str:
    sandbox = await sessions.connect(session_id)
    try:
        kind = await _kind(sandbox.files, path)
        if kind is None:
            raise FileNotFoundError(f"no such file or directory in {session_id}: {path}")
        if kind == "directory":
            count = await sandbox.files.download_dir(path, str(dest))
            return f"{session_id}:{path} -> {dest} ({count} entries)"
        target = dest / posixpath.basename(path) if into else dest
        temp = target.with_name(f".{target.name}.ironflow-{secrets.token_hex(6)}")
        try:
            # A fresh name, never a file or link already there: the rename replaces the target itself.
            with os.fdopen(os.open(temp, _NEW_FILE, 0o666), "wb") as f:
                size = await sandbox.files.read_to(path, f)
            temp.replace(target)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError | PermissionError) and exc.filename is None:
                raise  # the runtime's 404 or 403
            raise errors.ConfigError(f"cannot write '{target}': {exc.strerror or exc}") from None
        finally:
            temp.unlink(missing_ok=True)
        return f"{session_id}:{path} -> {target} ({size} bytes)"
    finally:
        await sandbox.disconnect()


def copy(
    source: Annotated[str, typer.Argument(metavar="SRC", help="A host path, or ID:PATH.", show_default=False)],
    dest: Annotated[str, typer.Argument(metavar="DST", help="ID:PATH, or a host path.", show_default=False)],
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
) -> None:
    """Copy a file or a directory's contents: SRC ID:DST into a session, ID:SRC DST out of it.

    Regular files, directories and relative symlinks inside the tree, either way: all else refuses the copy by name.
    """
    target = Target(server, backend, provider)
    remote_src, remote_dst = parse_remote(source), parse_remote(dest)
    if (remote_src is None) == (remote_dst is None):
        exits.fail("cp copies between the host and one session: use SRC ID:DST or ID:SRC DST")
    if remote_dst is not None:
        local = Path(source)
        try:
            mode = local.stat().st_mode
        except OSError:
            exits.fail(f"no such file or directory: {source}")
        is_dir = stat.S_ISDIR(mode)
        if not (is_dir or stat.S_ISREG(mode)):  # a FIFO would block the read, a device never end
            exits.fail(f"'{source}' is not a regular file or a directory: cp copies only those")
        line = _call(target, lambda s: _upload(s, local, is_dir, remote_dst[0], remote_dst[1]))
    else:
        assert remote_src is not None
        dest_path = Path(dest)
        if not dest_path.parent.is_dir():
            exits.fail(f"no such directory: {dest_path.parent}")
        into = dest_path.is_dir()
        line = _call(target, lambda s: _download(s, remote_src[0], remote_src[1], dest_path, into))
    typer.echo(line, err=True)


def _expires(info: SessionInfo) -> str:
    left = max(info.expires_at - time.time(), 0)
    return f"{left / 60:.0f}m" if left >= 60 else f"{left:.0f}s"


def list_sessions(
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")] = OutputFormat.TABLE,
) -> None:
    """List the open sessions of the server (with --provider: every session pod of its namespace)."""
    found: list[SessionInfo] = _call(Target(server, backend, provider), lambda s: s.list())
    if output is not OutputFormat.TABLE:
        print(document([info.to_json() for info in found], output))
        return
    table = tables.new("ID", "BACKEND", "ISOLATION", "EXPIRES IN", "RUN", "LABELS")
    for info in found:
        shown = ",".join(f"{k}={v}" for k, v in sorted(info.labels.items())) or "-"
        expires = _expires(info) + (" (paused)" if info.paused else "")
        table.add_row(info.id, info.backend, info.isolation, expires, info.run_id or "-", shown)
    print(tables.render(table, width=tables.stdout_width()))


def close(
    sandbox_id: Annotated[str | None, typer.Argument(metavar="[ID]", help="The session's id.", show_default=False)] = (
        None
    ),
    all_sessions: Annotated[bool, typer.Option("--all", help="Close every open session.")] = False,
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
) -> None:
    """Close a session (every process in it dies), or all of them with --all."""
    if (sandbox_id is None) == (not all_sessions):
        exits.fail("name one session: ironflow sandbox close ID, or every one with --all")
    ids = [] if sandbox_id is None else [session_exec.session_id(sandbox_id)]

    async def go(sessions: SessionBackend) -> list[tuple[str, bool]]:
        targets = ids or [info.id for info in await sessions.list()]
        return [(session_id, await sessions.close(session_id)) for session_id in targets]

    for session_id, closed in _call(Target(server, backend, provider), go):
        if not closed and not all_sessions:
            exits.fail(f"no open sandbox session '{session_id}'")
        typer.echo(f"closed {session_id}")


def diff(
    sandbox_id: Annotated[str, typer.Argument(metavar="ID", help="The session's id.", show_default=False)],
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    patch: Annotated[
        str | None, typer.Option("--patch", metavar="FILE", help="Write the patch there instead of stdout.")
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Write the change into the workspace's directory (all or none).")
    ] = False,
    output: Annotated[
        ResultFormat, typer.Option("--output", "-o", help="text: the patch; json or yaml: it and the changed files.")
    ] = ResultFormat.TEXT,
) -> None:
    """The patch of everything changed in a session's workspace since it was opened."""
    session_exec.session_id(sandbox_id)
    target = Target(server, backend, provider)

    async def go(sessions: SessionBackend) -> WorkspaceChanges:
        return await sessions.changes(sandbox_id, apply=apply)

    found = _call(target, go)
    if patch is not None:
        from ironflow.cli import workspace as ws  # the local sandbox's modules only when a patch is written

        ws.write_patch(found, patch)
    if output is not ResultFormat.TEXT:
        print(document(found.to_json(), output))
    elif patch is None:
        TerminalStream(sys.stdout).write(found.patch, final=True)  # exact to a pipe; shown safe to a terminal
    for changed in found.files:
        print(printable(f"{changed.change} {changed.path}"), file=sys.stderr)


def register(group: typer.Typer) -> None:
    """Add the session commands to the ``ironflow sandbox`` group."""
    group.command("open")(open_session)
    group.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(exec_in)
    group.command("cp")(copy)
    group.command("ls")(list_sessions)
    group.command("close")(close)
    group.command("diff")(diff)
