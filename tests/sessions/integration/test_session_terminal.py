"""A session command's terminal and controls under real bubblewrap: a pty (the ``python3`` REPL
typed into, resized, interrupted), stdin writes after start, signals by name, a background
command found again by a second client through ``sandbox serve``, and the refusals (no token,
a bad signal name, a write to a command that ended)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator

import aiohttp
import pytest
from tests.sessions.integration.screens import WAIT_S, Screen, drive_the_repl
from tests.sessions.integration.serving import TOKEN, Served

from ironflow import errors
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import AsyncSandbox, Exit, OpenOptions
from ironflow.sessions.remote import RemoteSessions

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


@pytest.fixture
async def sandbox(local_sessions: LocalSessions) -> AsyncIterator[AsyncSandbox]:
    async with await local_sessions.open(OpenOptions(ttl=120)) as opened:
        yield opened


async def test_the_python_repl_in_a_pty_answers_resizes_and_survives_ctrl_c(
    request: pytest.FixtureRequest, sandbox: AsyncSandbox
) -> None:
    handle = await sandbox.commands.start(["python3", "-q"], pty=True, cols=90, rows=20)
    if request.node.callspec.params["local_sessions"] == "gvisor":
        # this gVisor's pty turns no Ctrl-C into SIGINT (docs/sandbox-sessions.md): a signal instead
        await drive_the_repl(handle, interrupt=lambda: handle.signal("INT"))
    else:
        await drive_the_repl(handle)


async def test_a_pty_command_has_its_terminal_and_one_stream(sandbox: AsyncSandbox) -> None:
    result = await sandbox.commands.run(
        ["sh", "-c", "tty; stty size; echo err >&2"], pty=True, cols=100, rows=30, timeout=30
    )
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["/dev/pts/0", "30 100", "err"]
    assert result.stderr == ""


async def test_stdin_writes_reach_a_running_cat_and_its_end_ends_it(sandbox: AsyncSandbox) -> None:
    handle = await sandbox.commands.start(["cat"], keep_stdin=True, stdin="first\n")
    screen = Screen(handle)
    await screen.until("first\n")
    assert await handle.send_stdin(b"second\n") == 7
    await screen.until("second\n")
    await handle.send_stdin("last", eof=True)
    assert await screen.exit() == Exit(0, False)
    assert screen.text == "first\nsecond\nlast"


async def test_signal_term_ends_a_sleep_and_a_bad_name_is_one_line(sandbox: AsyncSandbox) -> None:
    handle = await sandbox.commands.start(["sleep", "60"])
    with pytest.raises(errors.ConfigError) as bad:
        await handle.signal("NOPE")
    assert "unknown signal 'NOPE'" in bad.value.message
    assert "\n" not in bad.value.message
    assert await handle.signal("TERM") is True
    result = await handle.wait(WAIT_S)
    assert result.exit_code == 128 + 15
    assert await handle.signal("KILL") is False  # ended: nothing is sent


async def test_a_command_that_ended_takes_no_stdin_and_no_resize(sandbox: AsyncSandbox) -> None:
    handle = await sandbox.commands.start(["true"], pty=True)
    await handle.wait(WAIT_S)
    with pytest.raises(errors.ConfigError, match="has ended"):
        await handle.send_stdin("late\n")
    with pytest.raises(errors.ConfigError, match="has ended"):
        await handle.resize(10, 10)
    piped = await sandbox.commands.start(["sleep", "60"])
    with pytest.raises(errors.ConfigError, match="stdin is closed"):
        await piped.send_stdin("x")  # started without keep_stdin
    with pytest.raises(errors.ConfigError, match="no terminal"):
        await piped.resize(10, 10)
    await piped.kill()


async def test_the_controls_need_the_token(local_sessions: LocalSessions, sandbox: AsyncSandbox) -> None:
    handle = await sandbox.commands.start(["sleep", "60"], keep_stdin=True)
    socket_path, token = local_sessions.route(sandbox.id)
    connector = aiohttp.UnixConnector(path=socket_path)
    async with aiohttp.ClientSession(connector=connector) as http:
        for action, body in (("stdin", b"x"), ("signal", b'{"signal": "KILL"}'), ("resize", b'{"cols": 9}')):
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                url = f"http://sandbox/ironflow/v1/commands/{handle.id}/{action}"
                async with http.post(url, data=body, headers=headers) as response:
                    assert response.status == 401, action
        assert token.reveal() not in repr(handle)
    assert (await handle.wait(0.5)).timed_out  # neither signal nor stdin got through: it still ran


async def test_a_background_command_is_found_again_by_a_second_client(served: Served) -> None:
    first = RemoteSessions(served.url, token=TOKEN)
    sandbox = await first.open(OpenOptions(ttl=120))
    try:
        handle = await sandbox.commands.start(["python3", "-q"], pty=True)
        await handle.send_stdin("x = 40\r")
        command_id = handle.id
        await sandbox.disconnect()
        await first.aclose()
        async with RemoteSessions(served.url, token=TOKEN) as second:
            again = await second.connect(sandbox.id)
            try:
                found = await again.commands.connect(command_id)
                screen = Screen(found)
                await screen.until("x = 40")  # what the first client typed, kept in the session
                await found.send_stdin("x + 2\r")
                await screen.until("\r\n42\r\n")
                await found.send_stdin("\x04")  # Ctrl-D: the REPL's end of input
                assert await screen.exit() == Exit(0, False)
                with pytest.raises(FileNotFoundError):
                    await again.commands.connect("c999")
            finally:
                await again.close()
    finally:
        await first.aclose()


async def test_stdin_streams_through_the_server_as_it_is_sent(served: Served) -> None:
    """One chunked stdin body through ``sandbox serve``: its first piece reaches the command (and
    its output comes back) while the body is still open."""
    async with RemoteSessions(served.url, token=TOKEN) as remote, await remote.open(OpenOptions(ttl=60)) as sandbox:
        handle = await sandbox.commands.start(["cat"], keep_stdin=True)
        screen = Screen(handle)
        echoed: list[str] = []

        async def body() -> AsyncIterator[bytes]:
            yield b"one\n"
            await screen.until("one\n")  # before the body ends
            echoed.append(screen.text)
            yield b"two\n"

        headers = {"Authorization": f"Bearer {TOKEN}", "X-Sandbox-ID": sandbox.id}
        url = f"{served.url}/ironflow/v1/commands/{handle.id}/stdin?eof=1"
        async with aiohttp.ClientSession() as http:
            async with http.post(url, data=b"x", headers={"X-Sandbox-ID": sandbox.id}) as refused:
                assert refused.status == 401  # no token: the server stops it before the session
            async with http.post(url, data=body(), headers=headers) as response:
                assert response.status == 200
                assert await response.json() == {"written": 8}
        assert await screen.exit() == Exit(0, False)
        assert (echoed, screen.text) == (["one\n"], "one\ntwo\n")


async def test_a_pty_command_that_cannot_start_exits_127_and_takes_no_control(sandbox: AsyncSandbox) -> None:
    handle = await sandbox.commands.start(["no-such-program"], pty=True)
    result = await handle.wait(WAIT_S)
    assert result.exit_code == 127
    with pytest.raises(errors.ConfigError, match="has ended"):
        await handle.send_stdin("x")
    with pytest.raises(errors.ConfigError, match="has ended"):
        await handle.resize(10, 10)
    assert await handle.signal("TERM") is False
