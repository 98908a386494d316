"""A local session's commands cannot reach the runtime that starts them, under bubblewrap, gVisor and
Docker (issue 34, H1 and L13; under Docker they can signal it, ending their own session): a hostile
command, a real program run in the session, tries to copy the
runtime's listening socket (``pidfd_open`` + ``pidfd_getfd``), read its memory and environment and
its fds through ``/proc``, stop and kill it; every attempt fails and the session still answers.
And a command that leaves a ``setsid`` child holding its pipes ends (L11): at once when it exits,
at its timeout when it does not, the child killed with it."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import SESSION_ISOLATIONS

from ironflow.local import LocalSandboxProvider
from ironflow.local.sandbox_provider import ProxyCredential
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sandbox_runtime import SERVER_PATH
from ironflow.secrets import Secret
from ironflow.sessions import OpenOptions
from ironflow.sessions.client import AsyncSandbox

#: The attack: find the runtime by its command line in /proc (``python -I -S …/entry.py``, Docker's
#: ``…/server.py``, gVisor's ``-c … …/runtime.packed``), then try everything on it; one line per
#: attempt, "refused" or what it got.
ATTACK = r"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
me = int(os.readlink("/proc/self"))

def args(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return []

def parent(pid):
    return int(open(f"/proc/{pid}/stat", "rb").read().rpartition(b")")[2].split()[1])

def runs(argv):  # python3 -I -S .../entry.py | .../server.py, or -c <start> .../runtime.packed (gVisor)
    if argv[3:4] == [b"-c"]:
        return argv[5:6] != [] and argv[5].endswith(b"/runtime.packed")
    return argv[3:4] != [] and argv[3].endswith((b"/entry.py", b"/server.py"))

found = [int(p) for p in os.listdir("/proc") if p.isdigit() and runs(args(p))]
runtime = [p for p in found if parent(p) not in found]  # not a fork of it (the commands' init)
assert len(runtime) == 1 and runtime[0] != me, (found, runtime)
pid = runtime[0]
print("runtime found")

def attempt(name, call):
    try:
        got = call()
    except OSError as exc:
        print(name, "refused", type(exc).__name__)
        return
    print(name, "GOT", repr(got)[:60])

def syscall(name, *argv):
    result = libc.syscall(*argv)
    if result < 0:
        raise OSError(ctypes.get_errno(), name)
    return result

for part in ("mem", "environ", "fd/0", "fd/3", "fd/4"):
    attempt(part, lambda: open(f"/proc/{pid}/{part}", "rb").read(64))
def links():
    got = []
    for n in range(16):
        try:
            got.append(os.readlink(f"/proc/{pid}/fd/{n}"))
        except OSError:
            pass
    if not got:
        raise PermissionError("not one fd link")
    return got

attempt("fd links", links)
pidfd = -1
try:
    pidfd = syscall("pidfd_open", 434, pid, 0)
except OSError as exc:
    print("pidfd_open refused", type(exc).__name__)
if pidfd >= 0 and pid == os.getpid():  # the runtime's number names me in my own namespace
    print("pidfd_open refused names me")
elif pidfd >= 0:
    print("pidfd_open GOT", pid)
    for n in range(3, 64):
        attempt(f"pidfd_getfd {n}", lambda: syscall("pidfd_getfd", 438, pidfd, n, 0))
if os.environ.get("SKIP_SIGNALS"):
    print("done")
    raise SystemExit
dirfd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY)
attempt("pidfd_send_signal SIGSTOP", lambda: syscall("pidfd_send_signal", 424, dirfd, signal.SIGSTOP, None, 0))
for sig in (signal.SIGSTOP, signal.SIGKILL):
    if pid == os.getpid():  # the runtime's number names me in my own namespace
        print(f"kill {sig.name} refused names me")
        continue
    attempt(f"kill {sig.name}", lambda: os.kill(pid, sig))
print("done")
"""


@pytest.fixture(params=SESSION_ISOLATIONS)
async def sessions(request: pytest.FixtureRequest, state: Path) -> AsyncIterator[LocalSessions]:
    async with LocalSessions(LocalSandboxProvider(isolation=request.param), state_dir=str(state)) as opened:
        yield opened


async def _still_answers(sandbox: AsyncSandbox) -> None:
    done = await asyncio.wait_for(sandbox.commands.run(["sh", "-c", "echo alive"], timeout=20), 30)
    assert (done.exit_code, done.stdout) == (0, "alive\n")


async def test_a_command_cannot_take_over_its_runtime(sessions: LocalSessions) -> None:
    async with await sessions.open(OpenOptions(ttl=120)) as sandbox:
        await sandbox.files.write("attack.py", ATTACK)
        docker = sessions.provider.isolation == "docker"
        # Under Docker the runtime shares its commands' uid and pid namespace: they can signal it (and
        # so end their own session), never take its fds or memory (it is non-dumpable), nor its socket.
        env = {"SKIP_SIGNALS": "1"} if docker else {}
        attack = ["python3", "-I", "-S", "attack.py"]
        done = await asyncio.wait_for(sandbox.commands.run(attack, timeout=30, env=env), 60)
        lines = done.stdout.splitlines()
        assert done.exit_code == 0, done
        assert (lines[0], lines[-1]) == ("runtime found", "done"), done
        refused = {line.split(" refused")[0] for line in lines if " refused" in line}
        must = {"mem", "fd/3", "fd/4", "pidfd_open", "pidfd_send_signal SIGSTOP", "kill SIGSTOP", "kill SIGKILL"}
        if docker:
            must = {"mem", "fd/3", "fd/4", "environ", "fd/0", "fd links"}
            assert "pidfd_open GOT" in done.stdout, done.stdout  # same uid: only its fds are out of reach
        if sessions.provider.isolation == "bwrap":
            # gVisor's /proc checks no ptrace right for these: what they show is the session's own
            # environment and the kinds of the runtime's fds (its sockets cannot be opened: fd/3, fd/4).
            must |= {"environ", "fd/0", "fd links"}
        assert must <= refused, done.stdout
        assert not any(line.startswith("pidfd_getfd") for line in lines if " refused" not in line), done.stdout
        await asyncio.sleep(0.5)  # a stop or a kill that did land would show now
        await _still_answers(sandbox)
        _, token = sessions.route(sandbox.id)
        assert token.reveal() not in done.stdout


async def test_a_setsid_child_holding_the_pipes_does_not_hold_the_command(sessions: LocalSessions) -> None:
    """Its output and exit code come within a few seconds of its end, not at the session's TTL."""
    async with await sessions.open(OpenOptions(ttl=120)) as sandbox:
        started = time.monotonic()
        done = await asyncio.wait_for(
            sandbox.commands.run(["sh", "-c", "setsid sleep 300 & sleep 0.3; echo hi"], timeout=60), 30
        )
        assert (done.exit_code, done.stdout, done.timed_out) == (0, "hi\n", False), done
        assert time.monotonic() - started < 10
        await _still_answers(sandbox)


async def test_a_timeout_ends_a_command_whose_setsid_child_holds_the_pipes(sessions: LocalSessions) -> None:
    """At its timeout, and the child it left goes with it."""
    async with await sessions.open(OpenOptions(ttl=120)) as sandbox:
        started = time.monotonic()
        script = "setsid sleep 300.0734 & sleep 0.3; echo started; sleep 300"
        done = await asyncio.wait_for(sandbox.commands.run(["sh", "-c", script], timeout=2), 30)
        assert (done.timed_out, done.stdout) == (True, "started\n"), done
        assert time.monotonic() - started < 10
        left = await sandbox.commands.run(["sh", "-c", "ps -eo args | grep -c '^sleep 300[.]0734$'"], timeout=20)
        assert left.stdout == "0\n", left
        background = await sandbox.commands.start(["sh", "-c", "setsid sleep 300.0735 & sleep 300"])
        await asyncio.sleep(1)
        await background.kill()
        ended = await asyncio.wait_for(background.wait(), 30)
        assert ended.exit_code != 0
        left = await sandbox.commands.run(["sh", "-c", "ps -eo args | grep -c '^sleep 300[.]0735$'"], timeout=20)
        assert left.stdout == "0\n", left


_OWN_FDS = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
pidfd = libc.syscall(434, os.getpid(), 0)
assert pidfd >= 0, ctypes.get_errno()
for name, number, argv in (("pidfd_getfd", 438, (pidfd, 1, 0)), ("process_madvise", 440, (pidfd, None, 0, 0, 0))):
    result = libc.syscall(number, *argv)
    print(name, result, os.strerror(ctypes.get_errno()) if result < 0 else "")
"""


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
async def test_the_seccomp_filter_refuses_another_process_s_fds_and_memory(state: Path) -> None:
    """``pidfd_getfd`` and ``process_madvise`` are refused (EPERM) even on a command's own pidfd."""
    async with (
        LocalSessions(LocalSandboxProvider(), state_dir=str(state)) as local,
        await local.open(OpenOptions(ttl=60)) as sandbox,
    ):
        done = await sandbox.commands.run(["python3", "-I", "-S", "-c", _OWN_FDS], timeout=30)
        assert done.stdout.splitlines() == [
            "pidfd_getfd -1 Operation not permitted",
            "process_madvise -1 Operation not permitted",
        ], done


_CAPABILITIES = r"""
import os
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    try:
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    except OSError:
        continue
    held = [k for k in ("CapInh", "CapPrm", "CapEff", "CapAmb") if int(status[k].strip(), 16)]
    name = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:4]
    if held:
        print(name, held)
"""


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
async def test_no_process_of_an_agent_session_keeps_a_capability(tmp_path: Path) -> None:
    """The proxy relay runs first and hands CAP_SYS_ADMIN on to the runtime: neither keeps it."""
    state = Path(tempfile.mkdtemp(prefix="ifs-cap-"))
    credential = ProxyCredential(Secret("sk-ant-api03-runtime-isolation-0123456789"), "api_key", "http://127.0.0.1:9")
    provider = LocalSandboxProvider(credential=credential, temp_dir=str(state))
    try:
        async with (
            LocalSessions(provider, state_dir=str(state)) as local,
            await local.open(OpenOptions(ttl=60), agent=True) as box,
        ):
            done = await box.commands.run(["python3", "-I", "-S", "-c", _CAPABILITIES], timeout=30)
            assert (done.exit_code, done.stdout) == (0, ""), done
    finally:
        shutil.rmtree(state, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
@pytest.mark.parametrize("how", [(), ("--runtime-uid", "10002", "--commands-uid", "10001")], ids=["pidns", "uid"])
def test_the_runtime_refuses_to_start_when_it_cannot_isolate_its_commands(how: tuple[str, ...], tmp_path: Path) -> None:
    """Fail closed: without the capability it needs (root with an empty bounding set has none), it exits."""
    drop = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]
    runtime = [sys.executable, "-I", "-S", SERVER_PATH, "--unix", str(tmp_path / "rt.sock"), "--isolate-commands"]
    done = subprocess.run([*drop, *runtime, *how], input=b"token\n", capture_output=True, timeout=60, check=False)
    assert done.returncode != 0
    assert b"ironflow-runtime: cannot keep commands away from the runtime" in done.stderr, done.stderr
    assert b"ready" not in done.stderr
    assert not (tmp_path / "rt.sock").exists()


#: As a gVisor session's spec starts it (``with_spec``): root, no bounding set, no_new_privs; the
#: runtime then sets its uids apart and says what it holds; a libc binding it made fails it there.
_APART = """
import os, sys
sys.path.insert(0, sys.argv[1])
import confine
if sys.argv[2] == "with_spec":
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    for cap in range(int(open("/proc/sys/kernel/cap_last_cap").read()) + 1):
        assert libc.prctl(24, cap, 0, 0, 0) == 0  # PR_CAPBSET_DROP

    class NoLibc:
        def __init__(self):
            raise AssertionError("a libc binding was made")

    confine._Libc = NoLibc
confine.isolate_commands(10002, 10001)
status = dict(line.split(":", 1) for line in open("/proc/thread-self/status") if line.startswith("Cap"))
print(os.getresuid(), sorted(k for k, v in status.items() if int(v, 16)))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
@pytest.mark.parametrize("start", ["with_spec", "bounded"])
def test_a_runtime_given_no_bounding_set_sets_its_uids_apart_with_no_libc_binding(start: str) -> None:
    """Its spec emptied the bounding set and set no_new_privs: the uid change clears the rest (and its
    dumpability), the runtime checks that nothing is left and makes no libc binding (_ctypes was
    21 ms of a gVisor open); given a bounding set, it drops that and the rest itself through libc."""
    python = [sys.executable, "-I", "-S", "-c", _APART, os.path.dirname(SERVER_PATH), start]
    done = subprocess.run(python, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(10002,", "10001,", "10002)", "[]"], done.stderr
