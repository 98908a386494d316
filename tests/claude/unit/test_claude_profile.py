"""Claude profile ConfigMaps: subdir rules, sibling mounts, and the copy prefix run by a real ``sh``.

Counterparts of the reference's ``k8s/profile.rs`` tests. The copy tests build the layout
the kubelet gives a ConfigMap volume (a ``..<timestamp>`` dir, a ``..data`` link to it,
and one link per key) in a temporary directory and run the generated shell with ``sh``.
"""

from __future__ import annotations

import os
import posixpath
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import AgentConfig, errors
from ironflow.claude import profile
from ironflow.claude.profile import ClaudeProfile
from ironflow.k8s import K8sEphemeralProvider
from ironflow.testing.k8s_validate import validate_manifests

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"


def kubelet_configmap(root: Path, files: dict[str, str]) -> Path:
    """A ConfigMap volume as the kubelet lays it out: keys are links through ``..data``."""
    root.mkdir(parents=True)
    stamp = root / "..2026_11_29_08_00_00.000000001"
    stamp.mkdir()
    for key, text in files.items():
        (stamp / key).write_text(text)
    (root / "..data").symlink_to(stamp.name)
    for key in files:
        (root / key).symlink_to(f"..data/{key}")
    return root


def run_sh(script: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", script],
        env={"PATH": os.environ["PATH"], "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def test_k8s_profile_copy_skips_configmap_internals(tmp_path: Path) -> None:
    mounts = tmp_path / "profiles"
    kubelet_configmap(mounts / "0", {"CLAUDE.md": "rules", ".mcp.json": "{}", "settings.json": "{}"})
    home = tmp_path / "home"
    home.mkdir()
    prefix = profile.profile_copy_prefix([ClaudeProfile("base")], mount_root=str(mounts))
    result = run_sh(prefix + "echo started", home)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "started\n"
    claude = home / ".claude"
    assert sorted(p.name for p in claude.iterdir()) == [".mcp.json", "CLAUDE.md", "settings.json"]
    assert all(not p.is_symlink() for p in claude.iterdir())
    assert (claude / "CLAUDE.md").read_text() == "rules"


def test_k8s_profile_copy_places_each_configmap_in_its_subdir(tmp_path: Path) -> None:
    mounts = tmp_path / "profiles"
    kubelet_configmap(mounts / "0", {"CLAUDE.md": "home"})
    kubelet_configmap(mounts / "1", {"review.md": "agent"})
    home = tmp_path / "home"
    home.mkdir()
    profiles = [ClaudeProfile("base"), ClaudeProfile("agents", "agents/review")]
    result = run_sh(profile.profile_copy_prefix(profiles, mount_root=str(mounts)) + "true", home)
    assert result.returncode == 0, result.stderr
    assert (home / ".claude" / "CLAUDE.md").read_text() == "home"
    assert (home / ".claude" / "agents" / "review" / "review.md").read_text() == "agent"
    assert not (home / ".claude" / "review.md").exists()


def test_k8s_profile_copy_failure_aborts_the_command(tmp_path: Path) -> None:
    """A key that cannot be copied (here a directory, refused by ``cp`` without -r) stops the agent."""
    mounts = tmp_path / "profiles"
    kubelet_configmap(mounts / "0", {"CLAUDE.md": "x"})
    (mounts / "0" / "nested").mkdir()
    home = tmp_path / "home"
    home.mkdir()
    result = run_sh(profile.profile_copy_prefix([ClaudeProfile("base")], mount_root=str(mounts)) + "echo AGENT", home)
    assert result.returncode == 1
    assert "AGENT" not in result.stdout


def test_k8s_profile_copied_before_credentials(tmp_path: Path) -> None:
    """A profile carrying .credentials.json cannot replace the step's credentials: they are written after."""
    p = (
        K8sEphemeralProvider.sandboxed(IMAGE)
        .claude_profile_configmap("base")
        .oauth_credentials_from_secret("creds", "credentials.json")
    )
    objs = p.manifests(AgentConfig("hi"), now=0)
    validate_manifests(objs)
    script = objs[-1]["spec"]["containers"][0]["command"][2]
    copy_at = script.index("cp -L")
    creds_at = script.index("IRONFLOW_CLAUDE_CREDENTIALS")
    assert copy_at < creds_at
    mounts = tmp_path / "profiles"
    kubelet_configmap(mounts / "0", {".credentials.json": "from-profile"})
    home = tmp_path / "home"
    home.mkdir()
    runnable = script.replace("'/etc/ironflow/claude-profile/0'", f"'{mounts}/0'").split("cd ")[0]
    runnable = runnable.rsplit("'claude'", 1)[0]
    result = run_sh(runnable + "true", home, IRONFLOW_CLAUDE_CREDENTIALS="from-secret")
    assert result.returncode == 0, result.stderr
    assert (home / ".claude" / ".credentials.json").read_text() == "from-secret"


def test_k8s_profile_absent_leaves_only_credentials() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).oauth_credentials_from_secret("creds", "k")
    objs = p.manifests(AgentConfig("hi"), now=0)
    validate_manifests(objs)
    script = objs[-1]["spec"]["containers"][0]["command"][2]
    assert script.startswith('mkdir -p "$HOME/.claude" && printf')
    assert "claude-profile" not in script


def test_k8s_profile_copy_prefix_is_empty_without_profiles() -> None:
    assert profile.profile_copy_prefix([]) == ""


def test_k8s_profile_copy_prefix_reads_the_mount_paths() -> None:
    prefix = profile.profile_copy_prefix([ClaudeProfile("a"), ClaudeProfile("b", "rules")])
    assert prefix == (
        "mkdir -p \"$HOME/.claude\" && for f in '/etc/ironflow/claude-profile/0'/* "
        "'/etc/ironflow/claude-profile/0'/.[!.]*; do [ -e \"$f\" ] || continue; "
        'cp -L "$f" "$HOME/.claude"/ || exit 1; done && '
        "mkdir -p \"$HOME/.claude/\"'rules' && for f in '/etc/ironflow/claude-profile/1'/* "
        "'/etc/ironflow/claude-profile/1'/.[!.]*; do [ -e \"$f\" ] || continue; "
        'cp -L "$f" "$HOME/.claude/"\'rules\'/ || exit 1; done && '
    )


def test_k8s_profile_mount_paths_are_siblings() -> None:
    paths = [profile.profile_mount_path(i) for i in range(3)]
    assert paths == [f"/etc/ironflow/claude-profile/{i}" for i in range(3)]
    assert all(not a.startswith(b + "/") for a in paths for b in paths)


def test_k8s_profile_configmap_maps_to_claude_home() -> None:
    p = K8sEphemeralProvider(IMAGE).claude_profile_configmap("base")
    assert p.settings.claude_profiles == (ClaudeProfile("base", ""),)


def test_k8s_profile_configmap_at_keeps_call_order() -> None:
    p = K8sEphemeralProvider(IMAGE).claude_profile_configmap_at("z", "z").claude_profile_configmap_at("a", "a")
    assert [x.configmap for x in p.settings.claude_profiles] == ["z", "a"]


def test_k8s_profile_configmap_at_rejects_parent_segment() -> None:
    with pytest.raises(errors.ConfigError) as info:
        K8sEphemeralProvider(IMAGE).claude_profile_configmap_at("cm", "rules/../..")
    assert info.value.message == "invalid claude profile subdir 'rules/../..': contains a '..' segment"


def test_k8s_profile_configmap_at_rejects_absolute_subdir() -> None:
    with pytest.raises(errors.ConfigError) as info:
        K8sEphemeralProvider(IMAGE).claude_profile_configmap_at("cm", "/etc")
    assert info.value.message == "invalid claude profile subdir '/etc': must be relative to ~/.claude"


def test_k8s_profile_configmap_at_rejects_duplicate_subdir() -> None:
    p = K8sEphemeralProvider(IMAGE).claude_profile_configmap_at("first", "rules")
    with pytest.raises(errors.ConfigError) as info:
        p.claude_profile_configmap_at("second", "rules")
    assert info.value.message == "claude profile subdir 'rules' is already mapped to ConfigMap 'first'"


def test_k8s_profile_configmap_twice_is_a_duplicate() -> None:
    with pytest.raises(errors.ConfigError, match="subdir '' is already mapped to ConfigMap 'a'"):
        K8sEphemeralProvider(IMAGE).claude_profile_configmap("a").claude_profile_configmap("b")


def test_k8s_profile_subdir_accepts_relative_paths() -> None:
    for subdir in ("", "rules", "agents/review", ".hidden", "a-b_c.d/e"):
        assert profile.validate_profile_subdir(subdir) is None


@pytest.mark.parametrize(
    ("subdir", "reason"),
    [
        ("/abs", "must be relative to ~/.claude"),
        ("a//b", "contains an empty segment"),
        ("a/", "contains an empty segment"),
        (".", "contains a '.' segment"),
        ("a/..", "contains a '..' segment"),
        ("a b", "segment 'a b' has a char outside [A-Za-z0-9._-]"),
        ("x/$(id)", "segment '$(id)' has a char outside [A-Za-z0-9._-]"),
        ("ré", "segment 'ré' has a char outside [A-Za-z0-9._-]"),
    ],
)
def test_k8s_profile_subdir_rejects_escapes_and_odd_chars(subdir: str, reason: str) -> None:
    assert profile.validate_profile_subdir(subdir) == reason


@given(
    st.lists(st.sampled_from(["", ".", "..", "a", "rules", "x y", "$HOME", "`", "~", "-"]), max_size=5), st.booleans()
)
def test_profile_subdir_validation_never_accepts_an_escape(segments: list[str], absolute: bool) -> None:
    """An accepted subdir stays under ~/.claude and holds nothing the shell would interpret."""
    subdir = ("/" if absolute else "") + "/".join(segments)
    if profile.validate_profile_subdir(subdir) is None:
        resolved = posixpath.normpath(posixpath.join("/home/claude/.claude", subdir))
        assert resolved == "/home/claude/.claude" or resolved.startswith("/home/claude/.claude/")
        assert not any(c in subdir for c in "$`~ '\"\\;&|")
