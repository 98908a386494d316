"""The auth-proxy and worker images pin their base by digest and install only hashed packages:
their Dockerfiles and docker/requirements.lock, checked offline (no Docker engine here)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ironflow.cluster import dockerfile, python_images

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILES = [ROOT / "docker" / "auth-proxy" / "Dockerfile", ROOT / "docker" / "worker" / "Dockerfile"]
LOCK = (ROOT / python_images.LOCK_PATH).read_text(encoding="utf-8")

#: The two images' Dockerfiles before the lock: a tag-only base and a plain `pip install .`.
UNPINNED = """\
FROM python:3.11-slim-bookworm AS build
RUN python -m venv /opt/ironflow && /opt/ironflow/bin/pip install . "uvloop>=0.19,<1"
FROM python:3.11-slim-bookworm
COPY --from=build /opt/ironflow /opt/ironflow
"""


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_the_image_pins_its_base_by_digest_and_installs_with_require_hashes(path: Path) -> None:
    parsed = dockerfile.parse_dockerfile(path.read_text(encoding="utf-8"))
    assert python_images.lint_python_dockerfile(parsed) == []
    assert all("@" in dockerfile.resolve_base(parsed, i) for i in parsed.of("FROM"))
    installs = [c for r in parsed.of("RUN") for c in dockerfile.shell_commands(r.args) if c[1:2] == ["install"]]
    assert [c for c in installs if "--require-hashes" in c], "the dependencies come from the hash lock"


def test_the_images_share_one_base_and_one_lock() -> None:
    bases = {i.args.split()[0] for p in DOCKERFILES for i in dockerfile.parse_dockerfile(p.read_text()).of("FROM")}
    assert bases == {"${PYTHON_BASE}"}
    for path in DOCKERFILES:
        parsed = dockerfile.parse_dockerfile(path.read_text())
        assert (
            dockerfile.resolve_base(parsed, parsed.of("FROM")[0]) == "python:3.11-slim-bookworm@${PYTHON_BASE_DIGEST}"
        )
        assert "PYTHON_BASE_DIGEST" in {i.args for i in parsed.of("ARG")}, "declared with no default: required"


def test_an_unpinned_base_and_an_unhashed_install_are_each_named() -> None:
    problems = python_images.lint_python_dockerfile(dockerfile.parse_dockerfile(UNPINNED))
    assert [p.rule for p in problems] == ["base-digest", "base-digest", "require-hashes", "lock-copied"]
    assert "python:3.11-slim-bookworm' is not pinned by digest" in problems[0].message
    defaulted = "ARG D=sha256:x\nFROM python:3.11@${D:?}\n"  # a default makes the digest optional: refused
    (problem,) = python_images.lint_python_dockerfile(
        dockerfile.parse_dockerfile(defaulted + "COPY " + python_images.LOCK_PATH + " .\n")
    )
    assert problem.rule == "base-digest"
    digest = "FROM python:3.11@sha256:" + "a" * 64 + " AS b\nFROM b\nCOPY docker/requirements.lock ./\n"
    assert python_images.lint_python_dockerfile(dockerfile.parse_dockerfile(digest)) == []


def test_the_lock_pins_and_hashes_every_requirement() -> None:
    assert python_images.lint_lock(LOCK) == []
    broken = "a==1 \\\n    --hash=sha256:" + "0" * 64 + "\nb>=2\nc==3\na==1 \\\n    --hash=sha256:" + "1" * 64 + "\n"
    assert [p.message for p in python_images.lint_lock(broken)] == [
        "'b>=2' is not pinned as name==version",
        "c==3 has no sha256 hash",
        "a is pinned twice",
    ]


def test_the_lock_holds_every_dependency_the_images_install_at_an_allowed_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wanted = [
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["proxy"],
        *project["build-system"]["requires"],
    ]
    pins = {canonicalize_name(k): v for k, v in python_images.lock_pins(LOCK).items()}
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in {python_images.LOCK_PATH}: run scripts/lock-python-images.py"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} does not satisfy {text}"
