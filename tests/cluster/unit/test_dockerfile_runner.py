"""The runner image's Dockerfile keeps every rule of ``ironflow.cluster.dockerfile``, and each rule
catches the Dockerfile that breaks it (no Docker engine here: the parsed file is checked)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow.cluster import dockerfile

RUNNER_DIR = Path(__file__).resolve().parents[3] / "docker" / "claude-runner"
DOCKERFILE = (RUNNER_DIR / "Dockerfile").read_text(encoding="utf-8")
VERSION = (RUNNER_DIR / "CLAUDE_CODE_VERSION").read_text(encoding="utf-8").strip()


def _rules(text: str, version: str | None = VERSION) -> set[str]:
    return {
        p.rule
        for p in dockerfile.lint_runner_dockerfile(dockerfile.parse_dockerfile(text), claude_code_version=version)
    }


def test_runner_dockerfile_passes_every_rule() -> None:
    problems = dockerfile.lint_runner_dockerfile(dockerfile.parse_dockerfile(DOCKERFILE), claude_code_version=VERSION)
    assert problems == []


def test_build_arg_default_agrees_with_the_claude_code_version_file() -> None:
    args = [i.args for i in dockerfile.parse_dockerfile(DOCKERFILE).of("ARG")]
    assert f"CLAUDE_CODE_VERSION={VERSION}" in args
    assert "version-arg" in _rules(DOCKERFILE, version="9.9.9")


def test_pinned_cli_module_uses_the_same_version() -> None:
    cli = pytest.importorskip("ironflow.claude.cli")
    assert cli.CLAUDE_CODE_VERSION == VERSION


def test_image_tag_is_the_claude_code_version_and_a_rebuild_number() -> None:
    tag = (RUNNER_DIR / "IMAGE_TAG").read_text(encoding="utf-8")
    assert dockerfile.lint_image_tag(tag, VERSION) == []
    assert tag.strip() == f"{VERSION}-1"


@pytest.mark.parametrize(
    "tag", ["latest", f"{VERSION}", f"{VERSION}-0", f"{VERSION}-latest", "2.1.331-1", f"v{VERSION}-1"]
)
def test_image_tag_refuses_a_tag_without_version_and_rebuild_number(tag: str) -> None:
    problems = dockerfile.lint_image_tag(tag, VERSION)
    assert [p.rule for p in problems] == ["image-tag"]
    assert tag in str(problems[0])


BASE = "node:22-bookworm-slim@sha256:43ac6c60b8f89723f746e8a92ce91abd5017e627ce1ddfe4238355d3a30b772c"


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        (f"ARG NODE_BASE={BASE}", "ARG NODE_BASE=node:22-bookworm-slim", "base-digest"),
        (f"ARG NODE_BASE={BASE}", "ARG NODE_BASE", "base-digest"),
        ("FROM ${NODE_BASE}", "FROM node:22-bookworm-slim", "base-digest"),
        (f"ARG NODE_BASE={BASE}", "ARG NODE_BASE=node:latest", "no-latest"),
        ("FROM ${NODE_BASE}", "FROM ${NODE_BASE} AS build\nFROM ${NODE_BASE}", "single-stage"),
        ("ARG CLAUDE_CODE_VERSION=2.1.332", "ARG OTHER=1", "version-arg"),
        ("ARG CLAUDE_CODE_VERSION=2.1.332", "ARG CLAUDE_CODE_VERSION=2.1.300", "version-arg"),
        ('&& test "$(claude --version | cut -d\' \' -f1)" = "${CLAUDE_CODE_VERSION}"', "&& true", "version-verified"),
        ('"@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}"', "@anthropic-ai/claude-code", "version-verified"),
        ('"@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}"', "@anthropic-ai/claude-code@latest", "no-latest"),
        ("USER 10001:10001", "USER claude", "user-10001"),
        ("USER 10001:10001", "USER 0:0", "user-10001"),
        ("useradd -u 10001 -g 10001 -m -d /home/claude claude", "useradd -m claude", "user-10001"),
        ("groupadd -g 10001 claude", "groupadd claude", "user-10001"),
        ("DISABLE_AUTOUPDATER=1 \\", "DISABLE_AUTOUPDATER=0 \\", "env"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \\", "OTHER=1 \\", "env"),
        ("HOME=/home/claude", "HOME=/root", "env"),
        ('"strictKnownMarketplaces": []', '"strictKnownMarketplaces": [{"source": "x"}]', "managed-settings"),
        ('"disableAllHooks": true', '"disableAllHooks": false', "managed-settings"),
        ("> /etc/claude-code/managed-settings.json", "> /tmp/settings.json", "managed-settings"),
        (
            "chown -R root:root /etc/claude-code /etc/ironflow",
            "chown -R 10001:10001 /etc/claude-code /etc/ironflow",
            "root-owned-dirs",
        ),
        ("chown -R root:root /etc/claude-code /etc/ironflow", "chown -R root:root /etc/claude-code", "root-owned-dirs"),
        (
            "chmod 0755 /etc/claude-code /etc/ironflow /etc/ironflow/claude-profile",
            "chmod 0777 /etc/claude-code",
            "root-owned-dirs",
        ),
        ("WORKDIR /home/claude", "WORKDIR /", "workdir"),
    ],
)
def test_each_rule_catches_the_dockerfile_that_breaks_it(old: str, new: str, rule: str) -> None:
    assert old in DOCKERFILE, f"fixture drifted from the Dockerfile: {old!r}"
    assert rule in _rules(DOCKERFILE.replace(old, new))


def test_user_appended_after_the_last_user_line_wins() -> None:
    """A later ``USER root`` undoes the numeric user, so the image would run as root."""
    assert "user-10001" in _rules(DOCKERFILE + "\nUSER root\n")


def test_problem_text_names_the_line_and_the_fix() -> None:
    problems = dockerfile.lint_runner_dockerfile(
        dockerfile.parse_dockerfile(DOCKERFILE.replace("FROM ${NODE_BASE}", "FROM node:22")),
        claude_code_version=VERSION,
    )
    text = str(problems[0])
    assert text.startswith("line ")
    assert "[base-digest]" in text
    assert "@sha256:" in text


def test_parser_joins_continuations_and_drops_comment_lines_inside_them() -> None:
    parsed = dockerfile.parse_dockerfile("FROM a\n# c\nRUN one \\\n  # inner\n  && two\nENV A=1 \\\n  B=2\n")
    assert [(i.keyword, i.args, i.line) for i in parsed.instructions] == [
        ("FROM", "a", 1),
        ("RUN", "one && two", 3),
        ("ENV", "A=1 B=2", 6),
    ]


def test_exec_form_is_read_as_json() -> None:
    parsed = dockerfile.parse_dockerfile('ENTRYPOINT ["claude", "-p"]\nCMD echo hi')
    assert parsed.instructions[0].exec_form() == ["claude", "-p"]
    assert parsed.instructions[1].exec_form() is None


@given(st.lists(st.from_regex(r"[a-z][a-z0-9=._-]{0,8}", fullmatch=True), min_size=1, max_size=6))
def test_a_continued_run_equals_the_same_run_on_one_line(words: list[str]) -> None:
    one_line = dockerfile.parse_dockerfile("RUN " + " ".join(words))
    continued = dockerfile.parse_dockerfile("RUN " + " \\\n    ".join(words))
    assert one_line.instructions == continued.instructions
