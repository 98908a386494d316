"""``ironflow render``: manifests on stdout as YAML or JSON; bad input exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from ironflow.cli import render
from ironflow.testing.k8s_validate import validate_manifests

PROVIDER = """
image: ghcr.io/acme/claude-runner:2.1.332-1
sandboxed: true
namespace: agents
"""


@pytest.fixture
def app() -> typer.Typer:
    """The command on its own app (a group, as in ``ironflow`` once several topics register)."""
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    render.register(app)
    return app


@pytest.fixture
def provider_file(tmp_path: Path) -> Path:
    path = tmp_path / "provider.yaml"
    path.write_text(PROVIDER)
    return path


def invoke(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["render", *args], env={"CLAUDE_CODE_ENTRYPOINT": "cli"})
    return result.exit_code, result.stdout, result.stderr


def test_render_prints_valid_yaml_documents(app: typer.Typer, provider_file: Path) -> None:
    code, out, err = invoke(app, "--provider", str(provider_file), "--prompt", "Summarise the repo")
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    validate_manifests(docs)
    assert [d["kind"] for d in docs] == ["Pod"]
    assert docs[0]["metadata"]["namespace"] == "agents"
    assert "'-p' 'Summarise the repo'" in docs[0]["spec"]["containers"][0]["command"][2]


def test_render_blanks_the_callers_claude_variables(app: typer.Typer, provider_file: Path) -> None:
    code, out, _ = invoke(app, "--provider", str(provider_file), "--prompt", "x")
    assert code == 0
    env = next(iter(yaml.safe_load_all(out)))["spec"]["containers"][0]["env"]
    assert {"name": "CLAUDE_CODE_ENTRYPOINT", "value": ""} in env


def test_render_json_lists_configmap_then_pod_for_a_large_prompt(
    app: typer.Typer, provider_file: Path, tmp_path: Path
) -> None:
    step = tmp_path / "step.yaml"
    step.write_text(yaml.safe_dump({"prompt": "p" * 100_001, "model": "opus", "max_turns": 4}))
    code, out, err = invoke(app, "--provider", str(provider_file), "--step", str(step), "-o", "json")
    assert code == 0, err
    objs = json.loads(out)
    validate_manifests(objs)
    assert [o["kind"] for o in objs] == ["ConfigMap", "Pod"]
    assert "'--model' 'opus'" in objs[1]["spec"]["containers"][0]["command"][2]


def test_prompt_option_wins_over_the_step_file(app: typer.Typer, provider_file: Path, tmp_path: Path) -> None:
    step = tmp_path / "step.yaml"
    step.write_text("prompt: from-file\n")
    code, out, _ = invoke(app, "--provider", str(provider_file), "--step", str(step), "--prompt", "from-flag")
    assert code == 0
    assert "'from-flag'" in out
    assert "from-file" not in out


def test_proxied_provider_renders_a_placeholder_token(app: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(PROVIDER + "auth_proxy: http://ironflow-auth-proxy:8080\n")
    code, out, _ = invoke(app, "--provider", str(path), "--prompt", "x")
    assert code == 0
    env = next(iter(yaml.safe_load_all(out)))["spec"]["containers"][0]["env"]
    assert {"name": "ANTHROPIC_AUTH_TOKEN", "value": render.DRY_RUN_PROXY_TOKEN} in env


@pytest.mark.parametrize(
    ("provider_text", "extra", "message"),
    [
        (PROVIDER + "bogus: 1\n", ["--prompt", "x"], "p.yaml': unknown key 'bogus'"),
        (PROVIDER, [], "error: no prompt: pass --prompt TEXT"),
        (PROVIDER + "env: {ANTHROPIC_API_KEY: sk-ant-x}\n", ["--prompt", "x"], "refuses ANTHROPIC_API_KEY"),
        (PROVIDER + "default_managed_settings: nope\n", ["--prompt", "x"], "unknown managed settings preset 'nope'"),
        ("image: [", ["--prompt", "x"], "is not valid YAML"),
        (
            PROVIDER + "read_only_volumes: [{pvc: repos, mount_path: /etc}]\n",
            ["--prompt", "x"],
            "read-only volume cannot be mounted at '/etc': it would hide reserved path '/etc/claude-code'",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    app: typer.Typer, tmp_path: Path, provider_text: str, extra: list[str], message: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(provider_text)
    code, out, err = invoke(app, "--provider", str(path), *extra)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert message in err
    assert "sk-ant-x" not in err


def test_missing_provider_file_exits_2(app: typer.Typer, tmp_path: Path) -> None:
    code, _, err = invoke(app, "--provider", str(tmp_path / "none.yaml"), "--prompt", "x")
    assert code == 2
    assert "cannot read provider file" in err


def test_bad_step_file_exits_2(app: typer.Typer, provider_file: Path, tmp_path: Path) -> None:
    step = tmp_path / "step.yaml"
    step.write_text("prompt: x\nmodle: opus\n")
    code, _, err = invoke(app, "--provider", str(provider_file), "--step", str(step))
    assert code == 2
    assert "unknown step setting 'modle'" in err


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        ("pvc_volumes: [{claim_name: c, mount_path: /var/run/secrets}]", "step pvc volume cannot be mounted at"),
        ("read_only_volumes: [{pvc: c, mount_path: /usr}]", "read-only volume cannot be mounted at '/usr'"),
        ("read_only_volumes: [{pvc: c, mount_path: /home/}]", "it would hide reserved path '/home/claude'"),
    ],
)
def test_a_step_mount_above_a_reserved_path_exits_2_with_one_line(
    app: typer.Typer, provider_file: Path, tmp_path: Path, volume: str, message: str
) -> None:
    step = tmp_path / "step.yaml"
    step.write_text(f"prompt: x\npod:\n  {volume}\n")
    code, out, err = invoke(app, "--provider", str(provider_file), "--step", str(step))
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1
    assert message in err


def _read_only_mounts(out: str) -> list[tuple[Any, ...]]:
    (pod,) = yaml.safe_load_all(out)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    return [
        (m["mountPath"], m.get("subPath"), volumes[m["name"]].get("persistentVolumeClaim"))
        for m in pod["spec"]["containers"][0]["volumeMounts"]
        if m["name"].startswith("ro-")
    ]


def test_a_read_only_pvc_is_spelt_the_same_in_step_and_provider_files(app: typer.Typer, tmp_path: Path) -> None:
    """``{pvc: CLAIM, mount_path, sub_path}`` in both files (issue 33); the same volume renders."""
    volume = "read_only_volumes: [{pvc: repos, mount_path: /data/repos, sub_path: main}]\n"
    provider, plain, step = tmp_path / "provider.yaml", tmp_path / "plain.yaml", tmp_path / "step.yaml"
    provider.write_text(PROVIDER + volume)
    plain.write_text(PROVIDER)
    step.write_text("prompt: x\npod:\n  " + volume)
    code, from_provider, err = invoke(app, "--provider", str(provider), "--prompt", "x")
    assert code == 0, err
    code, from_step, err = invoke(app, "--provider", str(plain), "--step", str(step))
    assert (code, err) == (0, "")
    expected = [("/data/repos", "main", {"claimName": "repos", "readOnly": True})]
    assert _read_only_mounts(from_provider) == _read_only_mounts(from_step) == expected


def test_the_old_step_file_spelling_renders_with_a_note(app: typer.Typer, provider_file: Path, tmp_path: Path) -> None:
    step = tmp_path / "step.yaml"
    step.write_text(
        "prompt: x\npod:\n  read_only_volumes: [{source: {PvcSource: {claim_name: repos}}, mount_path: /r}]\n"
    )
    code, out, err = invoke(app, "--provider", str(provider_file), "--step", str(step))
    assert code == 0, err
    assert _read_only_mounts(out) == [("/r", None, {"claimName": "repos", "readOnly": True})]
    assert err.startswith(f"note: step file '{step}': pod.read_only_volumes[0].source: ")
    assert "write 'pvc: ...' beside mount_path" in err
    assert err.count("\n") == 1


def test_render_shows_a_git_workspaces_clone_with_placeholder_tokens(app: typer.Typer, tmp_path: Path) -> None:
    """A dry run needs no git host token: the clone's token is the visible placeholder."""
    provider = tmp_path / "provider.yaml"
    provider.write_text(PROVIDER + "auth_proxy: http://auth-proxy.ironflow:8080\n")
    step = tmp_path / "step.yaml"
    step.write_text('prompt: fix\nworkspace: {source: "https://github.com/org/repo.git", ref: main}\n')
    code, out, err = invoke(app, "--provider", str(provider), "--step", str(step), "-o", "json")
    assert code == 0, err
    objects = json.loads(out)
    validate_manifests(objects)
    clone = objects[-1]["spec"]["initContainers"][0]
    assert clone["name"] == "ironflow-workspace-clone"
    env = {e["name"]: e["value"] for e in clone["env"]}
    assert env["GIT_CONFIG_VALUE_0"] == f"Authorization: Bearer {render.DRY_RUN_PROXY_TOKEN}"
    assert "dry-run" not in out


def test_render_shows_a_pvc_workspace(app: typer.Typer, provider_file: Path, tmp_path: Path) -> None:
    step = tmp_path / "step.yaml"
    step.write_text('prompt: fix\nworkspace: {source: "pvc:sources/repo"}\n')
    code, out, err = invoke(app, "--provider", str(provider_file), "--step", str(step), "-o", "json")
    assert code == 0, err
    pod = json.loads(out)[-1]
    mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] == "/workspace")
    assert mount["subPath"] == "repo"
