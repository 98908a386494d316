"""Pure decisions of the local provider and the CLI: ignored settings, sandbox env, exit codes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import errors
from ironflow.auth_proxy import relays, tokens
from ironflow.claude import layout
from ironflow.local import sandbox_provider
from ironflow.local.sandbox import argv, bwrap, environment, identity
from ironflow.provider import AgentProvider
from ironflow.secrets import Secret, looks_like_claude_credential
from ironflow.steps import AgentConfig


def test_a_plain_step_ignores_nothing() -> None:
    assert sandbox_provider.ignored_settings(AgentConfig("hi")) == ()


def test_kubernetes_only_settings_are_each_named() -> None:
    config = (
        AgentConfig("hi")
        .service_account("sa")
        .runtime_class("gvisor")
        .env_from_secret("GH", "gh", "token")
        .read_only_pvc("repos", "/data/repos")
        .read_only_config_map("cm", "/data/cm")
        .pvc_volume("work", "/work")
        .egress_profile("anthropic-only")
        .input("https://example.com/a", "/in/a")
    )
    ignored = " | ".join(sandbox_provider.ignored_settings(config, isolation="gvisor"))
    for needle in (
        "service_account",
        "runtime_class (local isolation is gvisor)",
        "GH",
        "/data/repos",
        "/data/cm",
        "pvc_volume work",
        "anthropic-only",
        "input /in/a",
    ):
        assert needle in ignored


def test_a_host_path_volume_is_applied_not_ignored() -> None:
    config = AgentConfig("hi").read_only_host_path("/srv/data", "/data")
    assert sandbox_provider.ignored_settings(config) == ()


def test_sandbox_env_holds_only_what_it_is_given_and_the_proxy_address() -> None:
    env = sandbox_provider.sandbox_env({"FOO": "1"}, proxy_token="ifap_abc")
    assert env["HOME"] == "/home/claude"
    assert env["TMPDIR"] == "/tmp"
    assert env["FOO"] == "1"
    assert env["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{sandbox_provider.PROXY_PORT}"
    assert env["ANTHROPIC_AUTH_TOKEN"] == "ifap_abc"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert "ANTHROPIC_API_KEY" not in env


@pytest.mark.parametrize("name", ["ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"])
def test_sandbox_env_refuses_credential_variables_by_name(name: str) -> None:
    with pytest.raises(errors.StepConfigError, match=f"must not receive {name}"):
        sandbox_provider.sandbox_env({name: "x"})


def test_sandbox_env_refuses_a_credential_value_without_echoing_it() -> None:
    with pytest.raises(errors.StepConfigError) as info:
        sandbox_provider.sandbox_env({"HARMLESS": "sk-ant-secret-value"})
    assert "sk-ant-secret-value" not in str(info.value)


def test_provider_refuses_bad_construction_values() -> None:
    with pytest.raises(errors.ConfigError, match="isolation must be"):
        sandbox_provider.LocalSandboxProvider(isolation="podman")  # type: ignore[arg-type]
    with pytest.raises(errors.ConfigError, match="docker_image is for isolation 'docker'"):
        sandbox_provider.LocalSandboxProvider(docker_image="ironflow-claude-runner:1")
    with pytest.raises(errors.ConfigError, match="timeout must be"):
        sandbox_provider.LocalSandboxProvider(timeout=0)
    with pytest.raises(errors.ConfigError, match="profile subdir"):
        sandbox_provider.LocalSandboxProvider(profiles=[sandbox_provider.LocalProfile("/", "../x")])
    with pytest.raises(errors.StepConfigError, match="ANTHROPIC_API_KEY"):
        sandbox_provider.LocalSandboxProvider(env={"ANTHROPIC_API_KEY": "k"})


def test_the_provider_satisfies_the_protocol_and_takes_accounts() -> None:
    local = sandbox_provider.LocalSandboxProvider()
    assert isinstance(local, AgentProvider)
    assert local.account_kind() == "claude_subscription"


def test_a_preset_is_ignored_only_when_the_provider_has_no_local_presets() -> None:
    config = AgentConfig("hi").managed_settings("strict")
    assert "managed_settings preset 'strict'" in " ".join(sandbox_provider.ignored_settings(config))
    assert sandbox_provider.ignored_settings(config, presets={"strict": {}}) == ()


def test_a_known_preset_replaces_the_default_managed_settings() -> None:
    config = AgentConfig("hi").managed_settings("strict")
    presets = {"strict": {"permissions": {"deny": ["Bash"]}}}
    assert environment.managed_settings_for(config, {"x": 1}, presets) == presets["strict"]
    assert environment.managed_settings_for(AgentConfig("hi"), {"x": 1}, presets) == {"x": 1}
    assert environment.managed_settings_for(config, {"x": 1}, {}) == {"x": 1}


def test_an_unknown_preset_is_refused_with_the_known_ones_listed() -> None:
    config = AgentConfig("hi").managed_settings("nope")
    with pytest.raises(
        errors.StepConfigError, match=r"unknown managed settings preset 'nope', known presets: \[a, b\]"
    ):
        environment.managed_settings_for(config, None, {"b": {}, "a": {}})


@given(
    st.dictionaries(
        st.from_regex(r"[A-Z][A-Z0-9_]{0,15}", fullmatch=True).filter(
            lambda n: n not in layout.PROXY_FORBIDDEN_ENV and environment.env_problem(n) is None
        ),
        st.text(st.characters(blacklist_characters="\0"), max_size=20),
        max_size=6,
    ),
    st.booleans(),
)
def test_sandbox_env_never_carries_a_claude_credential(extra: dict[str, str], poison: bool) -> None:
    if poison:
        extra = {**extra, "INNOCENT": "sk-ant-" + "x" * 10}
    if any(looks_like_claude_credential(v) for v in extra.values()):
        with pytest.raises(errors.StepConfigError):
            sandbox_provider.sandbox_env(extra, proxy_token="ifap_t")
        return
    env = sandbox_provider.sandbox_env(extra, proxy_token="ifap_t")
    assert not any(looks_like_claude_credential(v) for v in env.values())
    assert env["ANTHROPIC_AUTH_TOKEN"] == "ifap_t"
    proxy_keys = {"ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_AUTOUPDATER"}
    assert all(env[k] == v for k, v in extra.items() if k not in proxy_keys)


def test_construction_refuses_missing_profiles_bad_sizes_and_non_json_settings() -> None:
    with pytest.raises(errors.ConfigError, match="profile directory '/does/not/exist' does not exist"):
        sandbox_provider.LocalSandboxProvider(profiles=[sandbox_provider.LocalProfile("/does/not/exist")])
    with pytest.raises(errors.ConfigError, match="home_size_bytes must be a positive"):
        sandbox_provider.LocalSandboxProvider(home_size_bytes=0)
    with pytest.raises(errors.ConfigError, match="managed settings 'strict' is not JSON"):
        sandbox_provider.LocalSandboxProvider(managed_settings_presets={"strict": {"x": object()}})


@pytest.mark.parametrize(
    ("code", "stderr", "is_sandbox_error"),
    [
        (1, "bwrap: Can't mkdir /x: Read-only file system\n", True),
        (125, "ironflow-sandbox: setup failed: cd '/nope'\n", True),
        (128, "starting container: starting root container: starting sandbox: boom\n", True),
        (128, "my tool exits 128 on its own\n", False),
        (1, "some step error mentioning bwrap: later\n", False),
        (2, "bwrap: printed by the step itself, which exits 2\n", False),
        (0, "bwrap: warnings on success do not matter\n", False),
    ],
)
def test_runtime_failures_are_told_from_step_failures(code: int, stderr: str, is_sandbox_error: bool) -> None:
    if is_sandbox_error:
        with pytest.raises(errors.SandboxError, match="sandbox could not start the step"):
            argv.raise_if_sandbox_failed(code, stderr, "gvisor")
    else:
        argv.raise_if_sandbox_failed(code, stderr, "gvisor")


@pytest.mark.parametrize(
    ("code", "stderr", "expected"),
    [
        (1, "bwrap: execvp /nope: No such file or directory\n", 127),
        (1, "bwrap: execvp /etc/passwd: Permission denied\n", 126),
        (1, "bwrap: execvp /bin/x: Exec format error\n", 126),
        (1, "bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n", 1),
        (3, "bwrap: execvp /nope: No such file or directory\n", 3),  # the command's own output
        (0, "", 0),
    ],
)
def test_a_command_bwrap_cannot_execute_exits_like_in_a_shell(code: int, stderr: str, expected: int) -> None:
    assert argv.command_exit_code(code, stderr) == expected


def test_staged_sources_are_numbered_once_each_under_tmp() -> None:
    plan = identity.stage_plan(["/root/.pyenv/x", "/srv/a", "/root/.pyenv/x"])
    assert plan == {"/root/.pyenv/x": "/tmp/0", "/srv/a": "/tmp/1"}


@pytest.mark.parametrize("uid", [0, -1, True])
def test_the_sandbox_host_uid_must_not_be_root(uid: int) -> None:
    with pytest.raises(errors.ConfigError, match="sandbox_host_uid must be a non-root uid"):
        identity.check_host_uid(uid)


@pytest.mark.parametrize(("name", "value"), [("anthropic_api_key", "x"), ("MY_VAR", " sk-ant-x")])
def test_sandbox_env_withholds_a_credential_in_any_case_or_anywhere_in_a_value(name: str, value: str) -> None:
    with pytest.raises(errors.StepConfigError):
        environment.sandbox_env({name: value})


@pytest.mark.parametrize("path", ["/usr/bin", "/usr/local/bin/claude", "/mnt/ironflow-prompt", "/data/./x"])
def test_a_read_only_mount_takes_the_shared_reserved_paths(path: str) -> None:
    with pytest.raises(errors.ConfigError, match=r"reserved path|mount_path"):
        bwrap.bwrap_argv(
            bwrap.BwrapSettings(
                command=("true",), root_entries=(), read_only_mounts=(bwrap.ReadOnlyMount("/srv", path),)
            )
        )


@pytest.mark.parametrize(("isolation", "managed"), [("bwrap", {}), ("gvisor", None)])
def test_what_is_written_to_a_run_dir_is_refused_without_one(
    isolation: environment.Isolation, managed: dict[str, str] | None
) -> None:
    shape = argv.SandboxShape(isolation, (), 1 << 20, 1 << 20, None, None)
    with pytest.raises(ValueError, match="are written to the run's temp dir"):
        argv.render(shape, ("true",), tmp=None, working_dir=None, mounts=(), proxy_socket=None, env={}, managed=managed)


def test_gvisor_shows_a_host_path_elsewhere_only_when_it_is_a_directory_outside_its_tmpfs(tmp_path: Path) -> None:
    """A bind's mount point is its source's own host path, which must be a directory already there."""
    a_file = tmp_path / "f"
    a_file.write_text("x")
    moved = argv.mount_problem("gvisor", bwrap.ReadOnlyMount(str(a_file), "/data/f"))
    assert moved is not None
    assert "only if it is a directory" in moved
    assert argv.mount_problem("gvisor", bwrap.ReadOnlyMount(str(tmp_path), "/data")) is None
    assert argv.mount_problem("gvisor", bwrap.ReadOnlyMount("/usr/lib/os-release", "/usr/lib/os-release")) is None
    hidden = argv.mount_problem("gvisor", bwrap.ReadOnlyMount(str(tmp_path), "/home/data"))
    assert hidden is not None
    assert "hides '/home'" in hidden


def test_a_conversations_dir_is_owned_by_the_host_uid_and_needs_bubblewrap(tmp_path: Path) -> None:
    uid = tmp_path.stat().st_uid
    identity.check_conversations_dir(str(tmp_path), bubblewrap=True, host_uid=None)
    identity.check_conversations_dir(str(tmp_path), bubblewrap=True, host_uid=uid)
    with pytest.raises(errors.ConfigError, match=rf"must be owned by the sandbox's host uid .*: chown {uid + 1} "):
        identity.check_conversations_dir(str(tmp_path), bubblewrap=True, host_uid=uid + 1)
    with pytest.raises(errors.ConfigError, match=r"^conversations_dir needs isolation='bwrap'"):
        identity.check_conversations_dir(str(tmp_path), bubblewrap=False, host_uid=None)


def test_sessions_dir_is_the_old_name_of_conversations_dir(tmp_path: Path) -> None:
    renamed = r"LocalSandboxProvider\.sessions_dir is renamed conversations_dir"
    if os.geteuid() == 0:  # a root worker's sandbox writes as its non-root host uid
        os.chown(tmp_path, identity.DEFAULT_HOST_UID, identity.DEFAULT_HOST_UID)
    with pytest.warns(DeprecationWarning, match=renamed):
        provider = sandbox_provider.LocalSandboxProvider(sessions_dir=str(tmp_path))
    assert provider.conversations_dir == str(tmp_path)
    with pytest.warns(DeprecationWarning, match=renamed), pytest.raises(errors.ConfigError, match="needs isolation"):
        sandbox_provider.LocalSandboxProvider(isolation="gvisor", sessions_dir="/tmp")
    with pytest.warns(DeprecationWarning, match=renamed), pytest.raises(TypeError, match="not both"):
        sandbox_provider.LocalSandboxProvider(sessions_dir="/tmp", conversations_dir="/tmp")


def test_two_relays_with_one_variable_name_are_refused_at_construction() -> None:
    bearer = tokens.Injection("bearer")
    one = relays.RelaySpec("a-b", "a.example.com", bearer).with_value(Secret("v"))
    other = relays.RelaySpec("a.b", "b.example.com", bearer).with_value(Secret("v"))
    with pytest.raises(errors.ConfigError, match=re.escape("relays[1].name: another relay has the name 'a.b'")):
        sandbox_provider.LocalSandboxProvider(relays=(one, other))


def test_a_relays_variable_is_read_when_the_provider_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = relays.RelaySpec("api", "api.example.com", tokens.Injection("bearer"), credential_env="IFT_RELAY_V")
    monkeypatch.delenv("IFT_RELAY_V", raising=False)
    with pytest.raises(errors.MissingCredential, match="needs its credential in IFT_RELAY_V"):
        sandbox_provider.LocalSandboxProvider(relays=(spec,))
    monkeypatch.setenv("IFT_RELAY_V", "value-1")
    (relay,) = sandbox_provider.LocalSandboxProvider(relays=(spec,)).relays
    assert relay.secret().value.reveal() == "value-1"


async def test_local_sandbox_sessions_refuse_relays_rather_than_drop_them(tmp_path: Path) -> None:
    relay = relays.RelaySpec("api", "api.example.com", tokens.Injection("bearer")).with_value(Secret("v"))
    provider = sandbox_provider.LocalSandboxProvider(relays=(relay,))
    with pytest.raises(errors.ConfigError, match="sandbox sessions do not get them yet"):
        await provider.sessions(state_dir=str(tmp_path)).open()


@pytest.mark.parametrize(
    ("isolation", "tool", "covered"),
    [
        ("bwrap", "/tmp/cache/ironflow/claude-code/2.1.332/bin/claude", "/tmp"),
        ("gvisor", "/tmp/cache/ironflow/claude-code/2.1.332/bin/claude", "/tmp"),
        ("bwrap", "/home/claude/.local/lib/claude-code/cli.js", "/home/claude"),
        ("gvisor", "/var/tmp/claude-code/bin/claude", "/var/tmp"),
    ],
)
def test_a_tool_the_sandbox_would_hide_is_refused_in_one_line_naming_it(
    tmp_path: Path, isolation: environment.Isolation, tool: str, covered: str
) -> None:
    """Claude Code installed under /tmp (an XDG_CACHE_HOME there) was refused as a "read-only volume"
    the user never gave; under gVisor it would have been hidden by the sandbox's own tmpfs."""
    shape = argv.SandboxShape(isolation, (), 1 << 20, 1 << 20, None, None)
    with pytest.raises(errors.ConfigError) as caught:
        argv.render(
            shape, ("true",), tmp=str(tmp_path), working_dir=None, mounts=(), proxy_socket=None, env={},
            extra_tools=(tool,),
        )  # fmt: skip
    message = str(caught.value)
    assert "\n" not in message
    assert f"'{tool}' lies under '{covered}'" in message
    assert "XDG_CACHE_HOME" in message


@pytest.mark.parametrize("tool", ["/usr/local/bin/claude", "/opt/claude-code/bin/claude", "/root/.cache/cc/cli.js"])
def test_a_tool_outside_what_the_sandbox_replaces_is_accepted(tool: str) -> None:
    for isolation in ("bwrap", "gvisor"):
        assert argv.tool_problem(isolation, tool) is None
