"""``ironflow manifests``: options become the rendered set on stdout (YAML or a JSON List),
progress on stderr, and bad input exits 2 with one line naming the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from ironflow.cli import manifests
from ironflow.cluster import documents, examples, setup, workloads
from ironflow.k8s import K8sEphemeralProvider, K8sResources

ROOT = Path(__file__).resolve().parents[3] / "examples" / "k8s" / "sandbox"

# Only this topic's commands, registered as cli/app.py does: other topics are tested on their own.
app = typer.Typer()
app.callback()(lambda: None)
manifests.register(app)


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["manifests", *args])
    return result.exit_code, result.stdout, result.stderr


def test_default_output_is_the_rendered_default_configuration_as_yaml() -> None:
    code, out, err = _run()
    assert code == 0
    assert out == documents.file_text(setup.render_documents(setup.ClusterSetup()))
    assert "rendered" in err
    assert "rendered" not in out


def test_example_options_reproduce_the_example_files() -> None:
    """The files the top-level kustomization applies are what the CLI prints for the same names."""
    code, out, _ = _run("--auth-proxy", setup.DEFAULT_AUTH_PROXY_URL)
    assert code == 0
    printed = [d for d in yaml.safe_load_all(out) if d]
    kustomization = yaml.safe_load((ROOT / "kustomization.yaml").read_text(encoding="utf-8"))
    from_files = [
        d
        for name in kustomization["resources"]
        if name.endswith(".yaml") and name != examples.AUTH_PROXY_FILE
        for d in yaml.safe_load_all((ROOT / name).read_text(encoding="utf-8"))
        if d
    ]
    proxy_file = ROOT / examples.AUTH_PROXY_FILE
    if proxy_file.is_file():  # a Namespace the proxy's file creates is left out of namespace.yaml
        elsewhere = examples.namespaces_defined_in(proxy_file.read_text(encoding="utf-8"))
        printed = [d for d in printed if not (d["kind"] == "Namespace" and d["metadata"]["name"] in elsewhere)]
    assert sorted(map(json.dumps, printed)) == sorted(map(json.dumps, from_files))


def test_json_output_is_one_list_kubectl_accepts() -> None:
    code, out, _ = _run("-o", "json", "--cilium", "--gvisor", "-n", "agents")
    assert code == 0
    body = json.loads(out)
    assert body["kind"] == "List"
    kinds = {i["kind"] for i in body["items"]}
    assert {"CiliumNetworkPolicy", "RuntimeClass", "Namespace", "Role"} <= kinds
    assert body["items"][0]["metadata"]["name"] == "agents"


def test_egress_profiles_and_presets_are_selectable() -> None:
    code, out, _ = _run("--cilium", "--egress-profile", "git=gitlab.com,github.com", "--preset", "readonly")
    assert code == 0
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(out) if d]
    assert "claude-runner-egress-git" in names
    assert "claude-runner-egress-gitlab" not in names
    assert "claude-managed-readonly" in names
    assert "claude-managed-locked" not in names
    code, out, _ = _run("--cilium", "--no-egress-profiles")
    assert "egress-profile" not in out


def test_profile_dir_becomes_configmaps(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "CLAUDE.md").write_text("be brief\n")
    (tmp_path / ".mcp.json").write_text("{}\n")
    (tmp_path / "rules" / "a.md").write_text("rule a\n")
    code, out, _ = _run("--profile-dir", str(tmp_path), "-o", "json")
    assert code == 0
    maps = {i["metadata"]["name"]: i["data"] for i in json.loads(out)["items"] if i["kind"] == "ConfigMap"}
    assert maps["claude-profile"] == {".mcp.json": "{}\n", "CLAUDE.md": "be brief\n"}
    assert maps["claude-profile-rules"] == {"a.md": "rule a\n"}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-n", "Agents"], "namespace 'Agents' is not a DNS label"),
        (["--auth-proxy", "http://proxy"], "names neither a Service"),
        (["--auth-proxy", "https://proxy.example.com"], "a plain NetworkPolicy opens egress by IP only"),
        (["--preset", "strict"], "unknown managed settings preset 'strict'"),
        (["--egress-profile", "gitlab"], "must read NAME=HOST"),
        (["--egress-profile", "g=not a host"], "not a lower-case DNS name"),
        (["--profile-dir", "/nonexistent/profile"], "is not a directory"),
        (["--auth-proxy", "http://10.1.2.3", "--auth-proxy-deployment"], "is an IP address: the proxy's Deployment"),
        (["--auth-proxy-deployment"], "needs its URL (--auth-proxy"),
        (["--worker-deployment", "--worker-resources", "limits.cpu=lots"], "non-negative Kubernetes quantity"),
        (["--worker-deployment", "--worker-resources", "cpu=1"], "must read KEY=QUANTITY"),
        (["--worker-deployment", "--worker-image", "w:latest"], "must be a pinned reference"),
        (["--worker-deployment", "--agent-resources", "gpu=1"], "--agent-resources: unknown key 'gpu': known are"),
        (["--worker-deployment", "--agent-resources", "cpu_limit=100m"], "cpu_request 500m is above"),
        (["--worker-deployment", "--agent-resources", "memory_limit"], "must read KEY=QUANTITY"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_problem(args: list[str], fragment: str) -> None:
    code, out, err = _run(*args)
    assert code == 2
    assert out == ""
    assert fragment in err
    assert len(err.strip().splitlines()) == 1


def test_binary_profile_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    code, _, err = _run("--profile-dir", str(tmp_path))
    assert code == 2
    assert "is not UTF-8 text" in err


def test_deployment_flags_render_the_library_objects_for_the_same_settings() -> None:
    code, out, err = _run(
        "--auth-proxy",
        "http://relay.auth:8081",
        "--auth-proxy-deployment",
        "--auth-proxy-image",
        "reg/proxy:9",
        "--auth-proxy-replicas",
        "3",
        "--worker-deployment",
        "--worker-image",
        "reg/worker:9",
        "--runner-image",
        "reg/runner:9",
        "--worker-resources",
        "limits.memory=2Gi",
        "--agent-sandbox-rbac",
    )
    assert code == 0
    expected = setup.ClusterSetup(
        auth_proxy_url="http://relay.auth:8081",
        auth_proxy_deployment=workloads.AuthProxyDeployment(image="reg/proxy:9", replicas=3),
        worker_deployment=workloads.WorkerDeployment(
            image="reg/worker:9",
            runner_image="reg/runner:9",
            resources=workloads.WORKER_RESOURCES.with_values({"limits.memory": "2Gi"}),
        ),
        agent_sandbox_rbac=True,
    )
    assert out == documents.file_text(setup.render_documents(expected))
    assert "Deployment" in err


def _provider_file(*flags: str) -> dict[str, object]:
    code, out, err = _run("--worker-deployment", *flags, "-o", "json")
    assert code == 0, err
    (config_map,) = [i for i in json.loads(out)["items"] if i["metadata"]["name"] == workloads.PROVIDER_CONFIGMAP]
    body: dict[str, object] = yaml.safe_load(config_map["data"]["provider.yaml"])
    return body


def test_agent_resources_reach_the_workers_provider_file_and_so_its_agent_pods() -> None:
    assert "resources" not in _provider_file()  # the provider's defaults apply
    body = _provider_file("--agent-resources", "memory_limit=8Gi, ephemeral_storage_limit=none")
    assert body["resources"] == {"memory_limit": "8Gi", "ephemeral_storage_limit": "none"}
    provider = K8sEphemeralProvider.from_dict(body)
    assert provider.settings.resources == K8sResources(memory_limit="8Gi", ephemeral_storage_limit=None)
