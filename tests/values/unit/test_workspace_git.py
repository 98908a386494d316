"""The git a sandbox runs through the relay: the source parser, the relay URL, clone and push argv and env."""

from __future__ import annotations

import doctest
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import errors
from ironflow.secrets import find_leaks
from ironflow.workspaces import git_script

PROXY = "http://127.0.0.1:8080"
URL = "https://github.com/org/repo.git"
RELAY = "http://127.0.0.1:8080/r/github.com/org/repo.git"
TOKEN = "ifap_" + "ab" * 32
SHA = "0123456789abcdef0123456789abcdef01234567"


def test_docstring_examples_hold() -> None:
    assert doctest.testmod(git_script).failed == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://github.com/org/repo.git", ("https://github.com/org/repo.git", None)),
        ("https://GitHub.COM/Org/Repo.git@main", ("https://github.com/Org/Repo.git", "main")),
        ("HTTPS://gitlab.example.com/group/sub/proj", ("https://gitlab.example.com/group/sub/proj", None)),
        ("http://git.example.test/org/repo.git/", ("http://git.example.test/org/repo.git", None)),
        ("https://github.com/org/repo.git@v1.2.3", ("https://github.com/org/repo.git", "v1.2.3")),
        ("https://github.com/org/repo.git@release/2024-01", ("https://github.com/org/repo.git", "release/2024-01")),
        (f"https://github.com/org/repo.git@{SHA}", ("https://github.com/org/repo.git", SHA)),
        ("https://github.com/o_r.g/re~po+x.git@user@work", ("https://github.com/o_r.g/re~po+x.git", "user@work")),
    ],
)
def test_parse_git_source_splits_url_and_ref(text: str, expected: tuple[str, str | None]) -> None:
    assert git_script.parse_git_source(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("file:///srv/repo.git", "only https:// and http://"),
        ("ext::sh -c touch% /tmp/pwned", "printable ASCII without spaces"),
        ("ext::sh", "only https:// and http://"),
        ("ssh://git@github.com/org/repo.git", "only https:// and http://"),
        ("git@github.com:org/repo.git", "only https:// and http://"),
        ("github.com/org/repo.git", "only https:// and http://"),
        ("https://user:hunter2PASSWORD@github.com/org/repo.git", "no user name or password"),
        ("https://ghp_hunter2PASSWORD@github.com/org/repo.git", "no user name or password"),
        ("https://github.com:8443/org/repo.git", "no port"),
        ("https://[::1]/org/repo.git", "no port and no IP literal"),
        ("https://10.0.0.1/org/repo.git", "DNS name"),
        ("https://localhost/org/repo.git", "DNS name"),
        ("https://github.com./org/repo.git", "DNS name"),
        ("https://gith_ub.com/org/repo.git", "DNS name"),
        ("https:///org/repo.git", "DNS name"),
        ("https://github.com", "the path must name a repository"),
        ("https://github.com/", "the path must name a repository"),
        ("https://github.com/org/../other.git", "without '..'"),
        ("https://github.com/org/./repo.git", "the path must name a repository"),
        ("https://github.com//org/repo.git", "'//'"),
        ("https://github.com/org/repo%2e%2e.git", "percent-encoding"),
        ("https://github.com/org/repo.git?x=1", "'?'"),
        ("https://github.com/org/repo.git#frag", "'#'"),
        ("https://github.com/org/re\npo.git", "printable ASCII"),
        ("https://github.com/org/repo.git\x00", "printable ASCII"),
        ("https://github.com/org/répo.git", "printable ASCII"),
        ("https://github.com/org/repo.git@", "invalid git source ref"),
        ("https://github.com/org/repo.git@--upload-pack=touch", "not starting with '-'"),
        ("https://github.com/org/repo.git@main..dev", "no '..'"),
        ("https://github.com/org/repo.git@HEAD~1", "invalid git source ref"),
        ("https://github.com/org/repo.git@main@{1}", "invalid git source ref"),
        ("https://github.com/org/repo.git@x.lock", "'.lock'"),
        ("https://github.com/org/repo.git@a/.hidden", "invalid git source ref"),
        ("https://github.com/org/repo.git@a//b", "invalid git source ref"),
        ("https://github.com/org/repo.git@@", "invalid git source ref"),
        ("https://github.com/" + "a" * 2048, "up to 2048 characters"),
    ],
)
def test_parse_git_source_refuses_with_the_rule_and_never_the_input(text: str, problem: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        git_script.parse_git_source(text)
    assert problem in caught.value.message
    assert isinstance(caught.value, ValueError)
    assert not find_leaks(["hunter2PASSWORD", "touch"], caught.value)


@given(st.text(max_size=300))
def test_parse_git_source_raises_nothing_but_value_error(text: str) -> None:
    try:
        url, ref = git_script.parse_git_source(text)
    except ValueError:
        return
    assert url.startswith(("https://", "http://"))
    assert "@" not in url
    assert url.isascii()
    assert url.isprintable()
    assert " " not in url
    assert ref is None or not ref.startswith("-")
    assert git_script.parse_git_source(url) == (url, None)


_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
_SEGMENT = st.from_regex(r"[A-Za-z0-9_~+-][A-Za-z0-9._~+-]{0,12}", fullmatch=True)
_REF = st.from_regex(r"[A-Za-z0-9_+][A-Za-z0-9_+-]{0,12}(/[A-Za-z0-9_+][A-Za-z0-9_+-]{0,12}){0,2}", fullmatch=True)


@given(
    st.sampled_from(["https", "http"]),
    st.lists(_LABEL, min_size=1, max_size=3),
    st.sampled_from(["com", "org", "test"]),
    st.lists(_SEGMENT, min_size=1, max_size=4),
    st.none() | _REF,
)
def test_parse_git_source_keeps_a_valid_source_as_given(
    scheme: str, labels: list[str], tld: str, segments: list[str], ref: str | None
) -> None:
    url = f"{scheme}://{'.'.join([*labels, tld])}/{'/'.join(segments)}"
    assert git_script.parse_git_source(url if ref is None else f"{url}@{ref}") == (url, ref)


def test_relay_url_puts_the_host_and_path_under_r() -> None:
    assert git_script.relay_url(PROXY, URL) == RELAY
    assert git_script.relay_url(PROXY + "/", "https://GitLab.Example.com/g/p") == (
        "http://127.0.0.1:8080/r/gitlab.example.com/g/p"
    )
    assert git_script.relay_url("http://[::1]:9", URL) == "http://[::1]:9/r/github.com/org/repo.git"


@pytest.mark.parametrize("proxy", ["127.0.0.1:8080", "ftp://proxy", "http://", "http://p/x?y", "http://u@p"])
def test_relay_url_refuses_a_proxy_address_that_is_not_a_bare_origin(proxy: str) -> None:
    with pytest.raises(errors.ConfigError, match="invalid proxy address"):
        git_script.relay_url(proxy, URL)


def test_relay_url_refuses_a_url_still_carrying_its_ref() -> None:
    with pytest.raises(errors.ConfigError, match="give the ref on its own"):
        git_script.relay_url(PROXY, URL + "@main")


def _config(invocation: git_script.GitInvocation) -> dict[str, str]:
    env = invocation.env
    return {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))}


def test_clone_at_a_name_is_one_clone_with_the_token_in_the_env_only() -> None:
    invocation = git_script.clone_commands(PROXY, URL, TOKEN, directory="ws", ref="v1.2")
    assert invocation.url == RELAY
    assert invocation.commands == (("git", "clone", "--quiet", "--branch", "v1.2", "--", RELAY, "ws"),)
    assert _config(invocation) == {
        f"http.{RELAY}.extraHeader": f"Authorization: Bearer {TOKEN}",
        "credential.helper": "",
        "http.followRedirects": "false",
    }
    leaks_in_env = [v for k, v in invocation.env.items() if TOKEN in v and k != "GIT_CONFIG_VALUE_0"]
    assert leaks_in_env == []
    assert not find_leaks([TOKEN], invocation.commands, invocation.url, repr(invocation), str(invocation))


def test_clone_environment_makes_git_non_interactive_and_hermetic() -> None:
    env = git_script.clone_commands(PROXY, URL, TOKEN, directory="ws").env
    assert {k: env[k] for k in ("GIT_TERMINAL_PROMPT", "GIT_ASKPASS", "GIT_CONFIG_NOSYSTEM", "GIT_ALLOW_PROTOCOL")} == {
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_ALLOW_PROTOCOL": "http",
    }
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    https = git_script.clone_commands("https://proxy.example", URL, TOKEN, directory="ws").env
    assert https["GIT_ALLOW_PROTOCOL"] == "https"


def test_clone_of_the_default_branch_and_shallow() -> None:
    plain = git_script.clone_commands(PROXY, URL, TOKEN, directory="-odd dir")
    assert plain.commands == (("git", "clone", "--quiet", "--", RELAY, "-odd dir"),)
    shallow = git_script.clone_commands(PROXY, URL, TOKEN, directory="ws", ref="main", depth=1)
    assert shallow.commands == (("git", "clone", "--quiet", "--depth", "1", "--branch", "main", "--", RELAY, "ws"),)


def test_clone_at_a_commit_fetches_it_by_id_and_checks_it_out_detached() -> None:
    invocation = git_script.clone_commands(PROXY, URL, TOKEN, directory="ws", ref=SHA, depth=1)
    assert invocation.commands == (
        ("git", "init", "--quiet", "--", "ws"),
        ("git", "-C", "ws", "remote", "add", "origin", RELAY),
        ("git", "-C", "ws", "fetch", "--quiet", "--depth", "1", "origin", SHA),
        ("git", "-C", "ws", "checkout", "--quiet", "--detach", "FETCH_HEAD"),
    )


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"ref": "-b"}, "invalid ref"),
        ({"ref": "--upload-pack=evil"}, "invalid ref"),
        ({"ref": "a b"}, "invalid ref"),
        ({"ref": "main^"}, "invalid ref"),
        ({"depth": 0}, "invalid clone depth 0"),
        ({"directory": ""}, "invalid clone directory"),
        ({"directory": "ws\n"}, "invalid clone directory"),
    ],
)
def test_clone_refuses_bad_arguments(kwargs: dict[str, object], problem: str) -> None:
    args: dict[str, object] = {"directory": "ws", **kwargs}
    with pytest.raises(errors.ConfigError, match=problem):
        git_script.clone_commands(PROXY, URL, TOKEN, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("token", ["", "ifap_a\r\nX-Evil: 1", "ifap_a b", "ifap_é"])
def test_a_token_that_could_break_the_header_is_refused_unrepeated(token: str) -> None:
    with pytest.raises(errors.ConfigError, match="invalid proxy token") as caught:
        git_script.clone_commands(PROXY, URL, token, directory="ws")
    assert not find_leaks([token], caught.value)


def test_push_sends_head_to_a_new_branch_at_the_relay_url() -> None:
    invocation = git_script.push_commands(PROXY, URL, TOKEN, directory="ws", branch="ironflow/run-1")
    assert invocation.commands == (
        ("git", "-C", "ws", "-c", "safe.directory=ws", "push", "--quiet", "--no-verify",
         "--force-with-lease=refs/heads/ironflow/run-1:",
         "--", RELAY, "HEAD:refs/heads/ironflow/run-1"),
    )  # fmt: skip
    assert _config(invocation)[f"http.{RELAY}.extraHeader"] == f"Authorization: Bearer {TOKEN}"
    assert not find_leaks([TOKEN], invocation.commands, repr(invocation))


@pytest.mark.parametrize("branch", ["HEAD", SHA, "-f", "--mirror", "a..b", "a:b", "x.lock", "", "a/", ".a"])
def test_push_refuses_a_branch_that_is_no_plain_new_name(branch: str) -> None:
    with pytest.raises(errors.ConfigError, match="invalid branch"):
        git_script.push_commands(PROXY, URL, TOKEN, directory="ws", branch=branch)


@given(st.text(max_size=80))
def test_any_ref_is_refused_or_stays_one_plain_argument(ref: str) -> None:
    try:
        invocation = git_script.clone_commands(PROXY, URL, TOKEN, directory="ws", ref=ref)
    except ValueError:
        return
    argv = [arg for command in invocation.commands for arg in command]
    assert ref in argv
    assert not ref.startswith("-")
    assert ".." not in ref
    assert ":" not in ref


def test_the_push_script_clones_applies_to_the_index_commits_without_hooks_then_pushes() -> None:
    clone = git_script.clone_commands(PROXY, URL, TOKEN, directory="/w", ref="main")
    push = git_script.push_commands(PROXY, URL, TOKEN, directory="/w", branch="fix")
    script = git_script.push_script(clone, push, directory="/w", patch_file="/p/patch")
    lines = script.splitlines()
    assert lines[0] == "set -e"
    lines = [lines[0], *lines[lines.index("}") + 1 :]]  # after the connect-retry function
    assert lines[1].startswith("ironflow_connect git clone --quiet --branch main -- ")
    assert lines[2] == "git -C /w -c safe.directory=/w -c core.hooksPath=/dev/null apply --cached --binary /p/patch"
    assert (
        lines[3] == "git -C /w -c safe.directory=/w -c core.hooksPath=/dev/null commit --quiet --no-verify "
        '--message "$IRONFLOW_PUSH_MESSAGE"'
    )
    assert lines[4].startswith(
        "ironflow_connect git -C /w -c safe.directory=/w push --quiet --no-verify "
        "--force-with-lease=refs/heads/fix: -- "
    )
    assert TOKEN not in script  # it is in the invocations' environment only
    with pytest.raises(errors.ConfigError, match="clone directory"):
        git_script.push_script(clone, push, directory="/w", patch_file="")


def test_a_failed_push_says_gits_last_line_with_the_token_masked() -> None:
    said = f"remote: denied for {TOKEN}\nerror: failed to push some refs to '{RELAY}'\n"
    refused = git_script.push_failure(URL, "fix", said, token=TOKEN, silent="exit 1")
    assert isinstance(refused, errors.WorkspaceRefused)
    assert (
        refused.message
        == f"the git workspace push of '{URL}' to 'fix' failed: error: failed to push some refs to '{RELAY}'"
    )
    masked = git_script.push_failure(URL, "fix", f"fatal: {TOKEN}\n", token=TOKEN, silent="exit 1")
    assert find_leaks([TOKEN], masked.message) == []
    assert masked.message.endswith("failed: fatal: <token>")
    assert git_script.push_failure(URL, "fix", "\n", token=TOKEN, silent="exit 128").message.endswith(": exit 128")


def _fake_git(tmp_path: Path, failures: str, times: int) -> dict[str, str]:
    """A ``git`` that says ``failures`` and exits 128 its first ``times`` runs, then succeeds; it counts its runs."""
    fake = tmp_path / "bin" / "git"
    fake.parent.mkdir()
    fake.write_text(
        f"#!/bin/sh\nn=$(cat {tmp_path}/runs 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {tmp_path}/runs\n"
        f"if [ $n -le {times} ]; then echo {shlex.quote(failures)} >&2; exit 128; fi\necho cloned\n"
    )
    fake.chmod(0o755)
    return {"PATH": f"{fake.parent}:{os.environ['PATH']}"}


def test_a_clone_that_could_not_connect_is_retried_until_it_does(tmp_path: Path) -> None:
    """A new pod's first connections may be refused while NetworkPolicies are programmed (kube-router)."""
    said = "fatal: unable to access 'http://p/r/h/x.git/': Failed to connect to p port 80 after 1 ms: Couldn't connect"
    env = _fake_git(tmp_path, said, 2)
    clone = git_script.clone_commands(PROXY, URL, TOKEN, directory="ws", ref="main")
    script = "set -e\n" + git_script.connect_retried(clone.commands) + "\necho done\n"
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr
    assert (tmp_path / "runs").read_text() == "3\n"


def test_any_other_clone_failure_is_not_retried_and_keeps_gits_words_and_code(tmp_path: Path) -> None:
    env = _fake_git(tmp_path, "fatal: Remote branch nope not found in upstream origin", 5)
    clone = git_script.clone_commands(PROXY, URL, TOKEN, directory="ws", ref="nope")
    script = "set -e\n" + git_script.connect_retried(clone.commands) + "\necho done\n"
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (128, "")
    assert done.stderr == "fatal: Remote branch nope not found in upstream origin\n"
    assert (tmp_path / "runs").read_text() == "1\n"
