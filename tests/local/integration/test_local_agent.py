"""The whole local path with the real Claude Code CLI: sandbox, in-process proxy, offline model,
and nothing left behind on any path (success, failure, timeout, cancellation, release_run)."""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.claude import cli
from ironflow.fake_model.server import FakeAnthropic, Script, TextTurn
from ironflow.local.sandbox.bwrap import ReadOnlyMount
from ironflow.local.sandbox_provider import LocalProfile, LocalSandboxProvider, ProxyCredential
from ironflow.secrets import Secret
from ironflow.steps import AccountLease, AgentConfig, StepScope
from ironflow.testing import assert_no_leaks
from ironflow.testing.polling import eventually

KEY = "sk-ant-api03-local-agent-test-key-abcdef"


def _claude() -> str | None:
    try:
        return cli.find_claude_cli()
    except errors.ConfigError:
        return None


needs_cli = pytest.mark.skipif(_claude() is None, reason="Claude Code CLI not installed (run scripts/install)")
pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def log(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))


#: This test module's own parent for run temp dirs (others may run sandboxes meanwhile);
#: short, because the proxy's unix socket lives there.
TEMP = tempfile.mkdtemp(prefix="ifl-test-")


@pytest.fixture(scope="module", autouse=True)
def _remove_temp() -> Iterator[None]:
    yield
    shutil.rmtree(TEMP, ignore_errors=True)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(Script.of("Hello from the sandbox"), required_credential=KEY) as server:
        yield server


#: In the environment of every sandbox this module starts, so its process checks see only them.
RUN_MARK = f"ironflow-test-{uuid.uuid4().hex}"


def _provider(fake: FakeAnthropic, isolation: str = "bwrap", timeout: float = 60) -> LocalSandboxProvider:
    return LocalSandboxProvider(
        isolation=isolation,  # type: ignore[arg-type]
        timeout=timeout,
        credential=ProxyCredential(Secret(KEY), "api_key", fake.url),
        env={"CLAUDE_CODE_MAX_RETRIES": "0", "IRONFLOW_TEST_MARK": RUN_MARK},
        temp_dir=TEMP,
    )


def _leftovers(marker: str) -> tuple[list[str], list[str]]:
    """Processes of this test session's sandboxes (their environment holds :data:`RUN_MARK`, or
    their command line this module's :data:`TEMP`: another suite running beside this one has its
    own) whose command line holds ``marker``, and this module's run temp dirs still on disk."""
    procs = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmdline = fh.read()
                if marker.encode() not in cmdline:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as fh:  # gVisor's gofer drops it, but names our run dir
                    if RUN_MARK.encode() in fh.read() or TEMP.encode() in cmdline:
                        procs.append(pid)
            except OSError:
                continue
    return procs, glob.glob(os.path.join(TEMP, "ironflow-local-*"))


@needs_cli
@pytest.mark.claude_cli
async def test_real_cli_answers_through_sandbox_proxy_and_fake_model(
    fake: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    result = await _provider(fake).run(AgentConfig("Say hello from the sandbox"))
    assert result.text == "Hello from the sandbox"
    assert result.model == fake.message_requests[0].body["model"]
    request = fake.message_requests[0]
    assert request.header("x-api-key") == KEY  # injected by the proxy, outside the sandbox
    assert request.header("authorization") is None
    ids = {r.getMessage().split("token=")[1].split()[0] for r in caplog.records if "token=" in r.getMessage()}
    assert ids, "no token id was logged"
    assert all(len(i) == 12 and all(c in "0123456789abcdef" for c in i) for i in ids)
    assert "ifap_" not in caplog.text
    assert_no_leaks([KEY], caplog.text, result)


@needs_cli
@pytest.mark.claude_cli
async def test_stream_json_lines_reach_the_sink_and_debug_messages(fake: FakeAnthropic) -> None:
    sink = Lines()
    result = await _provider(fake).run(AgentConfig("hi"), logs=sink)
    assert result.text == "Hello from the sandbox"
    assert result.debug_messages
    assert any('"type":"result"' in line.replace(" ", "") for _, line in sink.lines)


@needs_cli
@pytest.mark.claude_cli
async def test_kubernetes_only_settings_are_reported_as_ignored(
    fake: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    config = (
        AgentConfig("hi")
        .service_account("agent")
        .runtime_class("gvisor")
        .egress_profile("anthropic-only")
        .read_only_pvc("repos", "/data/repos")
        .env_from_secret("GITHUB_TOKEN", "gh", "token")
    )
    result = await _provider(fake).run(config)
    assert result.text == "Hello from the sandbox"
    joined = " | ".join(result.ignored_settings)
    for name in ("service_account", "runtime_class", "egress_profile", "/data/repos", "GITHUB_TOKEN"):
        assert name in joined
    assert "ignores settings" in caplog.text


@needs_cli
@pytest.mark.claude_cli
async def test_read_only_host_path_is_bound_read_only(fake: FakeAnthropic, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "note.txt").write_text("from the host")
    provider = _provider(fake)
    config = AgentConfig("hi").read_only_host_path(str(data), "/data/in")
    assert (await provider.run(config)).text == "Hello from the sandbox"
    mounts = provider._step_mounts(config)
    result = await provider.run_command(
        ["sh", "-c", "cat /data/in/note.txt; touch /data/in/x 2>&1"], read_only_mounts=mounts
    )
    assert result.stdout.startswith("from the host")
    assert "Read-only file system" in result.stdout


@needs_cli
@pytest.mark.claude_cli
async def test_account_session_credential_goes_to_the_proxy_only(fake: FakeAnthropic) -> None:
    fake.reset()
    other = "sk-ant-oat01-account-session-token"
    provider = _provider(fake)
    config = AgentConfig("hi").account_lease(AccountLease("acct-1", "CLAUDE_CODE_OAUTH_TOKEN", Secret(other)))
    with pytest.raises(errors.ApiError) as info:  # the fake only knows KEY: a 401 from upstream
        await provider.run(config)
    assert info.value.status == 401 or "401" in str(info.value)
    assert fake.message_requests[0].header("authorization") == f"Bearer {other}"
    assert_no_leaks([other], info.value)


async def test_timeout_kills_the_whole_tree_and_leaves_nothing(fake: FakeAnthropic) -> None:
    marker = "ironflow-timeout-marker-7f3a"
    provider = _provider(fake)
    with pytest.raises(errors.AgentTimeout):
        await provider.run_command(["sh", "-c", f"sleep 60 & sleep 61 # {marker}"], timeout_s=0.5, auth_proxy=True)
    assert _leftovers(marker) == ([], [])


async def test_a_cancelled_proxied_step_has_its_token_revoked_before_the_cancel_returns(
    fake: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ironflow")
    marker = "ironflow-dropped-marker-93be"
    step = _provider(fake, timeout=120).run_command(["sh", "-c", f"sleep 60 # {marker}"], auth_proxy=True)
    task = asyncio.create_task(step)
    await eventually(lambda: "auth proxy token issued" in caplog.text, what="the step's token")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert "auth proxy token revoked" in caplog.text  # at once: before the cancel returned, not at expiry
    await eventually(lambda: _leftovers(marker) == ([], []), what=lambda: f"no leftovers, still {_leftovers(marker)}")


@pytest.mark.gvisor
@pytest.mark.skipif(shutil.which("runsc") is None, reason="runsc (gVisor) not installed")
async def test_gvisor_timeout_leaves_nothing(fake: FakeAnthropic) -> None:
    marker = "ironflow-gvisor-marker-51c2"
    provider = _provider(fake, "gvisor")
    with pytest.raises(errors.AgentTimeout):
        await provider.run_command(["sh", "-c", f"sleep 60 # {marker}"], timeout_s=1.5, auth_proxy=True)
    await eventually(lambda: _leftovers(marker) == ([], []), what=lambda: f"no leftovers, still {_leftovers(marker)}")
    await eventually(lambda: _leftovers("runsc")[0] == [], what=lambda: f"no runsc left, still {_leftovers('runsc')}")


async def test_cancellation_kills_the_sandbox_and_removes_its_files(fake: FakeAnthropic) -> None:
    marker = "ironflow-cancel-marker-2b9e"
    provider = _provider(fake)
    task = asyncio.create_task(provider.run_command(["sh", "-c", f"sleep 60 # {marker}"], auth_proxy=True))
    await eventually(lambda: _leftovers(marker)[0], what="the sandbox to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _leftovers(marker) == ([], [])


async def test_release_run_kills_what_the_run_still_has(fake: FakeAnthropic) -> None:
    marker = "ironflow-release-marker-9d01"
    provider = _provider(fake)
    task = asyncio.create_task(provider.run_command(["sh", "-c", f"sleep 60 # {marker}"], run_id="run-7"))
    await eventually(lambda: _leftovers(marker)[0], what="the sandbox to start")
    assert await provider.release_run("other-run") == 0
    assert await provider.release_run("run-7") == 1
    result = await task
    assert result.exit_code != 0
    assert _leftovers(marker) == ([], [])


@needs_cli
async def test_release_step_kills_an_earlier_attempt_of_that_step_only() -> None:
    """A retry on the same worker (Temporal's next attempt) starts with the old attempt gone."""
    async with FakeAnthropic(Script.of(TextTurn("late", delay_s=40)), required_credential=KEY) as slow:
        provider = _provider(slow)
        config = AgentConfig("hi").scoped("run-8", "review", root_run_id="run-8")
        task = asyncio.create_task(provider.run(config))
        await eventually(lambda: len(slow.requests) >= 1, what="the step's CLI to ask the model")
        assert await provider.release_step(StepScope("run-8", "lint")) == 0  # another step of the run
        assert await provider.release_step(StepScope("run-9", "review")) == 0  # the same step of another run
        assert await provider.release_step(StepScope("run-8", "review")) == 1
        with pytest.raises(errors.AgentError):
            await asyncio.wait_for(task, 20)  # ended by the kill, not by the model's late answer (40 s)
    assert _leftovers("ironflow-local-")[1] == []


@needs_cli
async def test_a_missing_working_dir_is_a_failed_step_not_a_hang(fake: FakeAnthropic) -> None:
    provider = _provider(fake)
    with pytest.raises(errors.ProcessFailed) as info:
        await provider.run(AgentConfig("hi").replace(working_dir="/does/not/exist"))
    assert info.value.exit_code != 0
    assert _leftovers("ironflow-local-")[1] == []


async def test_credential_variables_are_refused_for_the_sandbox(fake: FakeAnthropic) -> None:
    with pytest.raises(errors.StepConfigError, match="must not receive ANTHROPIC_API_KEY"):
        await _provider(fake).run_command(["true"], env={"ANTHROPIC_API_KEY": "x"})
    with pytest.raises(errors.StepConfigError, match="must not receive SOME_TOKEN"):
        await _provider(fake).run_command(["true"], env={"SOME_TOKEN": KEY})


@pytest.mark.parametrize("isolation", ["bwrap", pytest.param("gvisor", marks=pytest.mark.gvisor)])
async def test_managed_settings_are_placed_read_only_at_etc_claude_code(fake: FakeAnthropic, isolation: str) -> None:
    if isolation == "gvisor" and shutil.which("runsc") is None:
        pytest.skip("runsc (gVisor) not installed")
    provider = LocalSandboxProvider(isolation=isolation, managed_settings={"model": "haiku"})  # type: ignore[arg-type]
    result = await provider.run_command(
        ["sh", "-c", "cat /etc/claude-code/managed-settings.json; echo x > /etc/claude-code/managed-settings.json"]
    )
    assert '"model": "haiku"' in result.stdout
    assert result.exit_code != 0  # not writable by the step


@needs_cli
@pytest.mark.claude_cli
async def test_profile_directory_is_copied_into_home_claude_before_the_cli_starts(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    profile_dir = tmp_path / "profile"
    profile_dir.mkdir()
    (profile_dir / "CLAUDE.md").write_text("Always mention PROFILE-MARKER-4242.\n")
    provider = LocalSandboxProvider(
        credential=ProxyCredential(Secret(KEY), "api_key", fake.url),
        profiles=[LocalProfile(str(profile_dir))],
        env={"CLAUDE_CODE_MAX_RETRIES": "0"},
    )
    assert (await provider.run(AgentConfig("hi"))).text == "Hello from the sandbox"
    assert "PROFILE-MARKER-4242" in str(fake.message_requests[-1].body)


@pytest.mark.parametrize(
    ("mount_path", "message"),
    [
        ("/usr/share/ironflow-nope", "comes read-only from the host"),
        ("/home/claude/data", "reserved path"),
        ("data", "must be absolute"),
    ],
)
async def test_unusable_host_path_mounts_are_refused_before_anything_starts(
    fake: FakeAnthropic, tmp_path: Path, mount_path: str, message: str
) -> None:
    config = AgentConfig("hi").read_only_host_path(str(tmp_path), mount_path)
    with pytest.raises(errors.StepConfigError, match=message):
        await _provider(fake).run(config)
    assert fake.requests == []


async def test_a_missing_host_path_is_refused_naming_it(fake: FakeAnthropic) -> None:
    config = AgentConfig("hi").read_only_host_path("/does/not/exist", "/data")
    with pytest.raises(errors.StepConfigError, match="'/does/not/exist' is not a directory"):
        await _provider(fake).run(config)


@pytest.mark.parametrize("second", ["/data", "/data/"])
async def test_two_mounts_at_the_same_target_are_refused(fake: FakeAnthropic, tmp_path: Path, second: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mounts = [ReadOnlyMount(str(tmp_path / "a"), "/data"), ReadOnlyMount(str(tmp_path / "b"), second)]
    with pytest.raises(errors.ConfigError, match=f"duplicate volume mount path '{second}'"):
        await _provider(fake).run_command(["true"], read_only_mounts=mounts)


async def test_a_missing_sandbox_runtime_is_an_infrastructure_error(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(
        errors.SandboxError, match=r"bwrap is not installed: install it \(apt-get install -y bubblewrap\)"
    ):
        await _provider(fake).run_command(["true"])
    assert _leftovers("ironflow-local-")[1] == []


@pytest.mark.gvisor
@pytest.mark.skipif(shutil.which("runsc") is None, reason="runsc (gVisor) not installed")
async def test_gvisor_without_the_proxy_needs_no_bubblewrap(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runsc = shutil.which("runsc")
    assert runsc is not None
    (tmp_path / "runsc").symlink_to(runsc)
    monkeypatch.setenv("PATH", str(tmp_path))  # runsc only: no bwrap on this host
    result = await _provider(fake, "gvisor").run_command(["echo", "ok"])
    assert (result.exit_code, result.stdout) == (0, "ok\n")
    with pytest.raises(errors.SandboxError, match="bwrap is not installed"):
        await _provider(fake, "gvisor").run_command(["true"], auth_proxy=True)


async def test_parallel_steps_each_get_their_own_sandbox_and_proxy(fake: FakeAnthropic) -> None:
    provider = _provider(fake)
    results = await asyncio.gather(
        *(provider.run_command(["sh", "-c", 'echo "$ANTHROPIC_AUTH_TOKEN"'], auth_proxy=True) for _ in range(3))
    )
    tokens = {r.stdout.strip() for r in results}
    assert len(tokens) == 3
    assert all(t.startswith("ifap_") for t in tokens)


@needs_cli
@pytest.mark.claude_cli
async def test_a_prompt_over_the_argv_threshold_goes_through_stdin(fake: FakeAnthropic) -> None:
    prompt = "word " * 25_000  # 125,000 bytes: above the 100,000-byte argv threshold
    result = await _provider(fake).run(AgentConfig(prompt))
    assert result.text == "Hello from the sandbox"
    assert "word word word" in str(fake.message_requests[-1].body)


@needs_cli
@pytest.mark.claude_cli
@pytest.mark.gvisor
@pytest.mark.skipif(shutil.which("runsc") is None, reason="runsc (gVisor) not installed")
async def test_real_cli_answers_under_gvisor_too(fake: FakeAnthropic) -> None:
    result = await _provider(fake, "gvisor").run(AgentConfig("Say hello from the sandbox"))
    assert result.text == "Hello from the sandbox"
    assert fake.message_requests[-1].header("x-api-key") == KEY
    assert _leftovers("ironflow-local-")[1] == []


@needs_cli
@pytest.mark.claude_cli
@pytest.mark.parametrize("how", ["resume", "continue"])
async def test_conversations_dir_lets_a_later_step_resume_the_conversation(
    fake: FakeAnthropic, tmp_path: Path, how: str
) -> None:
    """``--resume ID`` names the conversation; ``--continue`` takes the latest one of the directory."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    if os.geteuid() == 0:  # a root worker's sandbox writes as its non-root host uid
        os.chown(sessions, 10001, 10001)
    provider = LocalSandboxProvider(
        credential=ProxyCredential(Secret(KEY), "api_key", fake.url),
        env={"CLAUDE_CODE_MAX_RETRIES": "0"},
        conversations_dir=str(sessions),
        temp_dir=TEMP,
    )
    first = await provider.run(AgentConfig("remember FIRST-TURN-MARKER"))
    assert first.session_id
    assert list(sessions.rglob("*.jsonl")), "the session was not kept on the host"
    later = {"resume_session_id": first.session_id} if how == "resume" else {"continue_session": True}
    second = await provider.run(AgentConfig("and now?").replace(**later))
    assert second.text == "OK"  # the script's default once its one turn is used
    assert "FIRST-TURN-MARKER" in str(fake.message_requests[-1].body)


def test_conversations_dir_needs_bubblewrap() -> None:
    with pytest.raises(errors.ConfigError, match="conversations_dir needs isolation='bwrap'"):
        LocalSandboxProvider(isolation="gvisor", conversations_dir="/tmp")


@needs_cli
@pytest.mark.claude_cli
async def test_an_agent_step_past_its_timeout_is_stopped_and_leaves_nothing(
    fake: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    fake.reset(Script.of(TextTurn("late", delay_s=3)))
    with pytest.raises(errors.AgentTimeout, match="agent timed out after 1s"):
        await _provider(fake, timeout=1).run(AgentConfig("hi"))
    assert _leftovers("claude.exe")[0] == []  # no claude process left
    assert _leftovers("ironflow-local-")[1] == []
    assert "auth proxy token revoked" in caplog.text


@needs_cli
@pytest.mark.claude_cli
async def test_a_step_timeout_shorter_than_the_providers_ends_the_step_at_its_own_bound(fake: FakeAnthropic) -> None:
    fake.reset(Script.of(TextTurn("late", delay_s=60)))
    started = time.monotonic()
    with pytest.raises(errors.AgentTimeout, match=r"after 2s \(the step's timeout\)") as caught:
        await _provider(fake, timeout=120).run(AgentConfig("hi").with_timeout(2))
    assert caught.value.bound == "step"
    assert time.monotonic() - started < 60  # the step's bound, far short of the provider's 120 s
    assert _leftovers("claude.exe")[0] == []


@needs_cli
@pytest.mark.claude_cli
async def test_releasing_a_root_run_kills_the_steps_of_its_sub_runs(fake: FakeAnthropic) -> None:
    fake.reset(Script.of(TextTurn("late", delay_s=3)))
    provider = _provider(fake)
    config = AgentConfig("hi").scoped("child-run", "plan", root_run_id="root-run")
    task = asyncio.create_task(provider.run(config))
    await eventually(lambda: fake.message_requests, interval_s=0.05, what="the step to reach the model")
    assert await provider.release_run("unrelated") == 0
    assert await provider.release_run("root-run") == 1
    with pytest.raises(errors.ProcessFailed):
        await task
    assert _leftovers("claude.exe")[0] == []


@pytest.mark.gvisor
@pytest.mark.skipif(shutil.which("runsc") is None, reason="runsc (gVisor) not installed")
async def test_a_gvisor_setup_failure_is_a_sandbox_error_not_a_failed_step(fake: FakeAnthropic) -> None:
    provider = _provider(fake, "gvisor")
    with pytest.raises(errors.SandboxError, match="setup failed: cd '/does/not/exist'"):
        await provider.run_command(["true"], working_dir="/does/not/exist")
    missing = await provider.run_command(["/does/not/exist"])  # the step's own failure: a result
    assert missing.exit_code != 0


@pytest.mark.parametrize("isolation", ["bwrap", pytest.param("gvisor", marks=pytest.mark.gvisor)])
async def test_a_program_that_cannot_run_exits_127_or_126_like_in_a_shell(fake: FakeAnthropic, isolation: str) -> None:
    """Both runtimes agree: a missing program is exit 127, one that cannot be executed 126; both
    are the command's failure (a result), not the sandbox's."""
    if isolation == "gvisor" and shutil.which("runsc") is None:
        pytest.skip("runsc (gVisor) not installed")
    provider = _provider(fake, isolation)
    missing = await provider.run_command(["/does/not/exist"])
    assert missing.exit_code == 127
    assert "/does/not/exist" in missing.stderr
    not_executable = await provider.run_command(["/etc/passwd"])
    assert not_executable.exit_code == 126
