"""The YAML under ``examples/k8s/sandbox/`` is exactly what ``ironflow.cluster.examples`` renders:
the examples and ``ironflow manifests`` cannot drift apart (regenerate with scripts/render-examples)."""

from __future__ import annotations

from pathlib import Path

import yaml

from ironflow.cluster import documents, examples, setup

ROOT = Path(__file__).resolve().parents[3] / "examples" / "k8s" / "sandbox"
HOME = ROOT / examples.PROFILE_DIR / examples.PROFILE_HOME
PROFILE_PATHS = sorted(str(p.relative_to(HOME)) for p in HOME.rglob("*") if p.is_file())
PROXY_FILE = ROOT / examples.AUTH_PROXY_FILE
RENDERED = examples.example_files(
    PROFILE_PATHS,
    with_auth_proxy=PROXY_FILE.is_file(),
    namespaces_elsewhere=examples.namespaces_defined_in(PROXY_FILE.read_text())
    if PROXY_FILE.is_file()
    else frozenset(),
)


def test_every_rendered_file_is_committed_byte_for_byte() -> None:
    for file in RENDERED:
        committed = (ROOT / file.path).read_text(encoding="utf-8")
        assert committed == documents.file_text(file.documents), f"{file.path} differs: run scripts/render-examples"


def test_no_yaml_file_in_the_example_set_is_hand_edited_outside_the_renderer() -> None:
    """Only the auth proxy's own file may sit next to the rendered ones."""
    on_disk = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.yaml")}
    assert on_disk - {f.path for f in RENDERED} <= {examples.AUTH_PROXY_FILE}


def test_rendered_text_reads_back_as_the_same_objects() -> None:
    for file in RENDERED:
        loaded = [d for d in yaml.safe_load_all(documents.file_text(file.documents)) if d is not None]
        assert loaded == [dict(o) for o in file.objects], file.path


def test_profile_kustomization_has_one_generator_per_directory_and_no_name_hash() -> None:
    body = yaml.safe_load((ROOT / examples.PROFILE_DIR / "kustomization.yaml").read_text(encoding="utf-8"))
    assert body["generatorOptions"] == {"disableNameSuffixHash": True}
    directories = [{Path(f).parent for f in g["files"]} for g in body["configMapGenerator"]]
    assert all(len(d) == 1 for d in directories)
    assert len({next(iter(d)) for d in directories}) == len(directories)
    assert [g["name"] for g in body["configMapGenerator"]] == ["claude-profile", "claude-profile-rules"]
    listed = sorted(f.removeprefix(f"{examples.PROFILE_HOME}/") for g in body["configMapGenerator"] for f in g["files"])
    assert listed == PROFILE_PATHS


def test_top_level_kustomization_applies_the_recommended_auth_proxy_set() -> None:
    body = yaml.safe_load((ROOT / "kustomization.yaml").read_text(encoding="utf-8"))
    assert "networkpolicy-egress-auth-proxy.yaml" in body["resources"]
    assert "networkpolicy-egress-anthropic.yaml" not in body["resources"]
    assert not any(r.startswith("cilium-") for r in body["resources"])
    assert "check-rbac.yaml" not in body["resources"], "the check account's pods/exec must be opt-in"
    assert examples.EXAMPLE_CONFIG.auth_proxy_url == setup.DEFAULT_AUTH_PROXY_URL


def test_cilium_files_keep_the_commented_postgres_rules_under_the_proxy_egress() -> None:
    text = (ROOT / "cilium-egress-auth-proxy.yaml").read_text(encoding="utf-8")
    assert "    # - toEndpoints:\n" in text
    assert "    # - toCIDR:\n" in text
    assert '    #         - port: "5432"\n' in text
    uncommented = text.replace("    # - ", "    - ").replace("    #   ", "      ").replace("    #     ", "        ")
    proxy = next(d for d in yaml.safe_load_all(uncommented) if d["metadata"]["name"] == "ironflow-auth-proxy")
    assert len(proxy["spec"]["egress"]) == 4, "uncommenting must add the two 5432 rules to the proxy's egress"


def test_a_namespace_the_proxy_file_creates_is_left_out_of_namespace_yaml() -> None:
    """kustomize refuses one object twice, so namespace.yaml yields to auth-proxy.yaml."""
    proxy_text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ironflow-system\n"
    elsewhere = examples.namespaces_defined_in(proxy_text)
    files = {
        f.path: f for f in examples.example_files(PROFILE_PATHS, with_auth_proxy=True, namespaces_elsewhere=elsewhere)
    }
    names = [o["metadata"]["name"] for o in files["namespace.yaml"].objects]
    assert names == ["ironflow-agents", "ironflow"]
    resources = yaml.safe_load(documents.file_text(files["kustomization.yaml"].documents))["resources"]
    assert resources[-1] == examples.AUTH_PROXY_FILE
