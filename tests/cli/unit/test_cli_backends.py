"""The one provider factory, :mod:`ironflow.cli.backends`: ``--provider FILE`` for ``--backend k8s`` /
``agent-sandbox`` loads one way for ``agent``, ``run``, ``exec`` and ``worker``, every problem an
exit 2 with one ``error:`` line naming it (no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ironflow.cli import backends
from ironflow.cli.app import app
from ironflow.kube.clusters import KubeconfigFile

K8S_FILE = "image: busybox\ncluster: {kubeconfig: kc.yaml}\n"
WORKFLOWS = Path(__file__).resolve().parents[2] / "engine" / "integration" / "engine_workflows.py"


def test_k8s_provider_loads_the_file_with_its_cluster(tmp_path: Path) -> None:
    path = tmp_path / "provider.yaml"
    path.write_text("image: busybox\nnamespace: agents\ncluster: {kubeconfig: kc.yaml}\n")
    provider = backends.k8s_provider(path)
    assert provider.settings.namespace == "agents"
    assert provider.settings.cluster == KubeconfigFile(str(tmp_path / "kc.yaml"))


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "--backend k8s needs --provider provider.yaml"),
        ("", "cannot read provider file"),
        ("imagez: x\n", "unknown key 'imagez'; did you mean 'image'?"),
        ("image: x\ncluster: {server: y}\n", "cluster: unknown key 'server'"),
    ],
)
def test_k8s_provider_problems_exit_2_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, words: str
) -> None:
    path: Path | None = None
    if content is not None:
        path = tmp_path / ("provider.yaml" if content else "missing.yaml")
        if content:
            path.write_text(content)
    with pytest.raises(SystemExit) as info:
        backends.k8s_provider(path)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert words in err
    assert err.count("\n") == 1


def test_agent_sandbox_provider_loads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sandbox.yaml"
    path.write_text("pod: {image: busybox, sandboxed: true, cluster: {kubeconfig: kc.yaml}}\nwarm_pool: pool\n")
    provider = backends.agent_sandbox_provider(path)
    assert provider.settings.pod.settings.cluster == KubeconfigFile(str(tmp_path / "kc.yaml"))


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "--backend agent-sandbox needs --provider provider.yaml"),
        ("", "cannot read provider file"),
        ("pod: [\n", "is not valid YAML"),
    ],
)
def test_agent_sandbox_provider_problems_exit_2_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, words: str
) -> None:
    path: Path | None = None
    if content is not None:
        path = tmp_path / ("sandbox.yaml" if content else "missing.yaml")
        if content:
            path.write_text(content)
    with pytest.raises(SystemExit) as info:
        backends.agent_sandbox_provider(path)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert words in err
    assert err.count("\n") == 1


def test_run_on_agent_sandbox_without_a_provider_file_exits_2(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'engine.db'}"
    args = ["run", f"{WORKFLOWS}:linear", "--backend", "agent-sandbox", "--store", store, "--wait"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    expected = "error: --backend agent-sandbox needs --provider provider.yaml (see docs/agent-sandbox.md)\n"
    assert result.stderr == expected


@pytest.mark.parametrize(
    "command",
    [
        ["agent", "--backend", "k8s", "hi"],
        ["exec", "--backend", "k8s", "--", "true"],
        ["run", f"{WORKFLOWS}:linear", "--backend", "k8s", "--wait"],
    ],
)
def test_every_command_refuses_a_bad_provider_file_the_same_way(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "provider.yaml"
    path.write_text("image: busybox\ncluster: {in_cluster: true, context: prod}\n")
    store = ["--store", f"sqlite:///{tmp_path / 'engine.db'}"] if command[0] == "run" else []
    args = [*command[:1], "--provider", str(path), *store, *command[1:]]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    expected = (
        f"error: provider file '{path}': cluster.context: does not apply to in_cluster: true (a pod has one cluster)\n"
    )
    assert result.stderr == expected


@pytest.mark.parametrize(
    ("command", "provider_yaml"),
    [
        (["run", f"{WORKFLOWS}:linear", "--backend", "k8s", "--wait"], K8S_FILE),
        (["worker"], K8S_FILE),
        (["worker"], "pod: {image: busybox, sandboxed: true, cluster: {kubeconfig: kc.yaml}}\n"),
    ],
)
def test_account_secrets_are_read_on_the_provider_files_cluster(
    tmp_path: Path, command: list[str], provider_yaml: str
) -> None:
    """The pool's Secret reader connects where the pods run, not to the default kubeconfig."""
    path = tmp_path / "provider.yaml"
    path.write_text(provider_yaml)
    store = ["--store", f"sqlite:///{tmp_path / 'engine.db'}"]
    account = ["--account", "main=secret:agents/claude/token"]
    result = CliRunner().invoke(app, [*command, "--provider", str(path), *store, *account])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"error: an account reads a Kubernetes Secret, but its cluster is unusable "
        f"(kubeconfig file '{tmp_path / 'kc.yaml'}'): failed to create K8s client from kubeconfig file"
    )


@pytest.mark.parametrize("backend", ["k8s", "agent-sandbox"])
def test_an_account_on_a_backend_without_the_auth_proxy_is_refused(tmp_path: Path, backend: str) -> None:
    """A subscription's token reaches the proxy only: without one the step would run on the pod's own credential."""
    path = tmp_path / "provider.yaml"
    path.write_text(
        K8S_FILE if backend == "k8s" else "pod: {image: busybox, sandboxed: true, cluster: {kubeconfig: kc.yaml}}\n"
    )
    store = ["--store", f"sqlite:///{tmp_path / 'engine.db'}"]
    args = ["run", f"{WORKFLOWS}:linear", "--backend", backend, "--wait", "--provider", str(path), *store]
    result = CliRunner().invoke(app, [*args, "--account", "main=env:IRONFLOW_TEST_NO_SUCH_TOKEN"])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: --account on --backend {backend}: accounts need the auth proxy: a " + (
        "subscription's token reaches the proxy only, never a sandbox, and this provider has none "
        "(set auth_proxy in the provider file, or run without --account)\n"
    )
