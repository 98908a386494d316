"""The real ``kubectl kustomize`` builds ``examples/k8s/sandbox`` into exactly the objects
``ironflow manifests`` renders for the example configuration (profile ConfigMaps included)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ironflow.cluster import examples, setup

ROOT = Path(__file__).resolve().parents[3] / "examples" / "k8s" / "sandbox"
KUBECTL = shutil.which("kubectl")

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def test_kubectl_kustomize_output_equals_the_rendered_example_configuration() -> None:
    assert KUBECTL is not None
    built = subprocess.run([KUBECTL, "kustomize", str(ROOT)], capture_output=True, text=True, timeout=60, check=True)
    objects = {_key(o): o for o in yaml.safe_load_all(built.stdout) if o}
    home = ROOT / examples.PROFILE_DIR / examples.PROFILE_HOME
    profile = {str(p.relative_to(home)): p.read_text(encoding="utf-8") for p in home.rglob("*") if p.is_file()}
    rendered = setup.render(examples.EXAMPLE_CONFIG, profile=profile)
    if (ROOT / examples.AUTH_PROXY_FILE).is_file():  # the auth proxy's own objects are not ours to render
        proxy_keys = {_key(o) for o in yaml.safe_load_all((ROOT / examples.AUTH_PROXY_FILE).read_text()) if o}
        objects = {k: v for k, v in objects.items() if k not in proxy_keys}
        rendered = [o for o in rendered if _key(o) not in proxy_keys]
    assert objects == {_key(o): o for o in rendered}
