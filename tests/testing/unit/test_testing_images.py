"""What ``scripts/images build`` really runs: every command the helper starts is recorded (no tool
runs), and none can reach a registry: each buildah call is in a network namespace of its own, a
bud or a from never pulls, a bud or a run has no network; and a second build is a cache hit."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ironflow.cluster import image_builds
from ironflow.testing import images

ROOT = Path(__file__).resolve().parents[3]


class Recorder:
    """Stands in for ``subprocess.run``: records argv, fakes the files and images buildah would make."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.images: set[str] = set()

    def __call__(self, argv: Sequence[str], **_: Any) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        verb = next(
            (a for a in argv if a in {"inspect", "commit", "bud", "push", "mmdebstrap", "download", "pack"}), ""
        )
        if verb == "inspect":
            return subprocess.CompletedProcess(argv, 0 if argv[-1] in self.images else 1, "0" * 64, "")
        if verb == "commit":
            self.images.add(argv[-1])
        elif verb == "bud":
            self.images.add(argv[argv.index("--tag") + 1])
        elif verb == "push":
            Path(argv[argv.index("--digestfile") + 1]).write_text("sha256:" + "1" * 64)
            Path(argv[-1].split(":")[1]).write_bytes(b"archive")
        elif verb == "mmdebstrap":
            Path(argv[-4]).write_bytes(b"rootfs")
        elif verb == "download":
            Path(argv[argv.index("--dest") + 1]).mkdir(parents=True)
        return subprocess.CompletedProcess(argv, 0, "", "")


@pytest.fixture
def recorder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    monkeypatch.setenv("IRONFLOW_IMAGES_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(images, "missing_tools", list)
    fake = Recorder()
    monkeypatch.setattr(subprocess, "run", fake)  # the helper calls subprocess.run through the module
    return fake


def test_every_buildah_call_is_isolated_and_never_pulls(recorder: Recorder) -> None:
    (built,) = images.build(ROOT, ["worker"], log=lambda _: None)
    buildah = [c for c in recorder.calls if "buildah" in c]
    assert buildah
    for argv in buildah:
        assert argv[:3] == ["unshare", "--net", "--mount"], argv
        verb = argv[argv.index("buildah") + len(images.buildah_argv())]
        if verb in {"bud", "from"}:
            assert "--pull=never" in argv, argv
        if verb in {"bud", "run"}:
            assert "--network=none" in argv, argv
    (bud,) = [c for c in buildah if "bud" in c]
    assert f"PYTHON_BASE={image_builds.base_reference(image_builds.BASES['python'], images._arch())}" in bud
    assert built.reference == "docker.io/library/ironflow-worker:0.1.0"
    assert Path(built.archive) == images.archive_path(ROOT, "worker")


def test_fetches_run_on_the_host_and_only_through_the_ordinary_clients(recorder: Recorder) -> None:
    images.build(ROOT, ["auth-proxy"], log=lambda _: None)
    outside = [c for c in recorder.calls if c[0] != "unshare" or "--net" not in c]
    assert [next(w for w in c if w in {"mmdebstrap", "pip"}) for c in outside] == ["mmdebstrap", "pip"]
    (mmdebstrap,) = [c for c in recorder.calls if "mmdebstrap" in c]
    assert mmdebstrap[:4] == ["unshare", "--mount", "--propagation", "private"]


def test_a_second_build_is_a_cache_hit_and_runs_no_build(recorder: Recorder) -> None:
    images.build(ROOT, ["worker"], log=lambda _: None)
    before = len(recorder.calls)
    (again,) = images.build(ROOT, ["worker"], log=lambda _: None)
    assert again.cached
    assert [c[-2] for c in recorder.calls[before:]] == ["{{.FromImageID}}"]


def test_a_missing_tool_is_named_with_the_command_that_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "missing_tools", lambda: ["mmdebstrap"])
    with pytest.raises(images.ImagesNotAvailable, match=r"missing mmdebstrap .*scripts/install --test"):
        images.build(ROOT, ["worker"], log=lambda _: None)


def test_a_name_now_holding_another_trees_image_is_built_again(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    images.build(ROOT, ["worker"], log=lambda _: None)
    monkeypatch.setattr(images, "_image_id", lambda _: "sha256:" + "f" * 64)
    (again,) = images.build(ROOT, ["worker"], log=lambda _: None)
    assert not again.cached
