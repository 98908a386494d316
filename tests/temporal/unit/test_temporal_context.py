"""The workflow side refuses a wave with the engine's own words."""

from __future__ import annotations

import pytest

from ironflow.engine import runner
from ironflow.temporal import workflow


@pytest.mark.parametrize("name", ["lint", 'say "hi"', "back\\slash", "fix bug/42"])
def test_a_duplicate_wave_name_is_refused_in_the_engine_s_words(name: str) -> None:
    assert workflow.wave_duplicate_message(name) == runner.wave_duplicate_message(name)
