"""The pinned Helm: ``scripts/helm`` and ``ironflow.testing.helm`` name one version and one place,
and a missing binary is reported with the command that builds it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from ironflow.testing import helm

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "helm"


def test_the_script_builds_the_version_the_finder_looks_for() -> None:
    pinned = re.search(r"^HELM_VERSION=v(\S+)", SCRIPT.read_text(), re.MULTILINE)
    assert pinned is not None
    assert pinned.group(1) == helm.HELM_VERSION


def test_the_script_prints_the_bin_dir_the_finder_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "ironflow" / "helm" / helm.HELM_VERSION / "bin" / "helm"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    printed = subprocess.run(["bash", str(SCRIPT), "bin-dir"], capture_output=True, text=True, env=env, check=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("IRONFLOW_HELM", raising=False)
    assert Path(printed.stdout.strip()) == helm.find_helm().parent == fake.parent


def test_a_missing_build_names_the_command_that_makes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("IRONFLOW_HELM", raising=False)
    with pytest.raises(helm.HelmNotAvailable, match="run scripts/helm build"):
        helm.find_helm()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(SCRIPT), "bin-dir"], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 1
    assert "run scripts/helm build" in done.stderr
