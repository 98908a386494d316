"""``examples/agent-sandbox/`` is exactly what ``ironflow sandbox render`` prints for each pattern
(regenerate with scripts/render-examples), so the examples cannot drift from the renderer; the
CRD-schema check of every example lives in test_examples_validate.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ironflow.cli.app import app

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "agent-sandbox"
PATTERNS = {
    "ephemeral": [],
    "standalone-pvc": [],
    "warm-pool": [],
    "network-secure": [],
    "network-air-gapped": [],
    "network-custom-egress": ["--egress", "10.0.0.0/24:5432"],
}


def test_every_example_file_is_a_rendered_pattern() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.yaml")) == sorted(PATTERNS)


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_example_equals_the_rendered_pattern(pattern: str) -> None:
    done = CliRunner().invoke(app, ["sandbox", "render", pattern, *PATTERNS[pattern]])
    assert done.exit_code == 0, done.output
    assert (EXAMPLES / f"{pattern}.yaml").read_text() == done.stdout


def test_default_image_is_the_runner_image_tag() -> None:
    from ironflow.agent_sandbox import patterns

    tag = (EXAMPLES.parents[1] / "docker" / "claude-runner" / "IMAGE_TAG").read_text().strip()
    assert f"ironflow-claude-runner:{tag}" == patterns.DEFAULT_IMAGE
