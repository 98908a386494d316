"""No image reference is ever resolved remotely: every Dockerfile takes its base by build argument
(or a stage), and every buildah command of the plan runs with no network and never pulls."""

from __future__ import annotations

from pathlib import Path

import pytest

from ironflow.cluster import dockerfile, image_builds, workloads

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILES = sorted(ROOT.glob("docker/*/Dockerfile"))
BUILDAH = ["buildah", "--root", "/c/storage"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_from_names_a_build_arg_base_or_a_stage(path: Path) -> None:
    parsed = dockerfile.parse_dockerfile(path.read_text(encoding="utf-8"))
    froms = parsed.of("FROM")
    global_args = {i.args.partition("=")[0] for i in parsed.of("ARG") if i.line < froms[0].line}
    stages: set[str] = set()
    for instruction in froms:
        words = instruction.args.split()
        image = words[0]
        assert image in stages or image.removeprefix("${").removesuffix("}") in global_args, (
            f"{path}:{instruction.line}: FROM {image} is neither a stage nor a build argument: a local build "
            "could not pass its own base, and a builder would look for it in a registry"
        )
        if len(words) >= 3 and words[1].upper() == "AS":
            stages.add(words[2])


def test_every_image_is_built_from_its_repository_dockerfile_with_the_base_arg_it_declares() -> None:
    assert {r.dockerfile for r in image_builds.IMAGES.values()} == {p.relative_to(ROOT).as_posix() for p in DOCKERFILES}
    for recipe in image_builds.IMAGES.values():
        parsed = dockerfile.parse_dockerfile((ROOT / recipe.dockerfile).read_text(encoding="utf-8"))
        assert f"${{{recipe.base_arg}}}" in {i.args.split()[0] for i in parsed.of("FROM")}
        assert parsed.of("USER")[-1].args == recipe.user


def test_the_built_names_are_the_ones_the_manifests_use() -> None:
    references = {n: r.reference for n, r in image_builds.IMAGES.items()}
    assert references == {
        "runner": workloads.DEFAULT_RUNNER_IMAGE,
        "auth-proxy": workloads.DEFAULT_AUTH_PROXY_IMAGE,
        "worker": workloads.DEFAULT_WORKER_IMAGE,
    }
    tag = (ROOT / "docker" / "claude-runner" / "IMAGE_TAG").read_text(encoding="utf-8").strip()
    assert (
        image_builds.local_reference(workloads.DEFAULT_RUNNER_IMAGE)
        == f"docker.io/library/ironflow-claude-runner:{tag}"
    )


def _plan() -> list[list[str]]:
    """Every buildah command a build of every image runs, as the I/O helper composes them."""
    argv: list[list[str]] = []
    for base in image_builds.BASES.values():
        reference = image_builds.base_reference(base, "x86_64")
        argv += image_builds.import_base_argv(BUILDAH, tarball="/c/base.tar", reference=reference)
    for recipe in image_builds.IMAGES.values():
        tag = image_builds.local_reference(recipe.reference)
        argv.append(image_builds.bud_argv(BUILDAH, recipe, arch="x86_64", dockerfile="D", context="/ctx", tag=tag))
        argv.append(image_builds.push_argv(BUILDAH, tag=tag, archive="/c/a.tar", digest_file="/c/d"))
    return [image_builds.isolated(a) for a in argv]


def test_every_buildah_call_runs_in_a_network_namespace_and_never_pulls() -> None:
    for argv in _plan():
        assert argv[:3] == ["unshare", "--net", "--mount"], argv
        verb = argv[argv.index("buildah") + len(BUILDAH)]
        if verb in {"bud", "from"}:
            assert "--pull=never" in argv, argv
        if verb in {"bud", "run"}:
            assert "--network=none" in argv, argv


def test_each_bud_passes_a_local_base_by_its_build_arg() -> None:
    for recipe in image_builds.IMAGES.values():
        argv = image_builds.bud_argv(BUILDAH, recipe, arch="x86_64", dockerfile="D", context="/ctx", tag="t")
        base = argv[argv.index(f"{recipe.base_arg}={image_builds.base_reference(recipe.base, 'x86_64')}") - 1]
        assert base == "--build-arg"
        assert image_builds.base_reference(recipe.base, "x86_64").startswith("localhost/ironflow-base-")


def test_the_cache_key_follows_every_input_and_nothing_else() -> None:
    recipe = image_builds.IMAGES["worker"]
    key = image_builds.cache_key(recipe, arch="x86_64", files={"a": "1", "b": "2"}, lock="L")
    assert key == image_builds.cache_key(recipe, arch="x86_64", files={"b": "2", "a": "1"}, lock="L")
    changed = [
        image_builds.cache_key(recipe, arch="x86_64", files={"a": "1", "b": "3"}, lock="L"),
        image_builds.cache_key(recipe, arch="x86_64", files={"a": "1", "b": "2"}, lock="M"),
        image_builds.cache_key(recipe, arch="aarch64", files={"a": "1", "b": "2"}, lock="L"),
        image_builds.cache_key(image_builds.IMAGES["auth-proxy"], arch="x86_64", files={"a": "1", "b": "2"}, lock="L"),
    ]
    assert key not in changed
    assert len(set(changed)) == len(changed)


def test_the_base_comes_from_the_debian_archive_with_no_apt_sources_left() -> None:
    argv = image_builds.mmdebstrap_argv(image_builds.BASES["python"], output="/c/b.tar")
    assert argv[0] == "mmdebstrap"
    assert "bookworm" in argv
    assert "--include=python3,python3-venv,python-is-python3,passwd,ca-certificates" in argv
    assert any(a.startswith("--customize-hook=") and "sources.list" in a for a in argv)
    assert all(m.startswith("deb http://deb.debian.org/") for m in argv[argv.index("/c/b.tar") + 1 :])


def test_fetches_use_the_ordinary_clients_with_hashes() -> None:
    pip = image_builds.pip_download_argv(lock="L", dest="/w", arch="x86_64")
    assert pip[:3] == ["-m", "pip", "download"]
    assert "--require-hashes" in pip
    assert "--only-binary=:all:" in pip
    assert pip[pip.index("--platform") + 1] == "manylinux_2_36_x86_64"
    npm = image_builds.npm_pack_argv(version="2.1.332", arch="x86_64", cache="/n")
    assert npm[:2] == ["npm", "pack"]
    assert npm[-2:] == ["@anthropic-ai/claude-code@2.1.332", "@anthropic-ai/claude-code-linux-x64@2.1.332"]
