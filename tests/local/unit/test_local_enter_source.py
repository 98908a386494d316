"""The worker and ironflow-enter (enter.c) agree on how many bind sources the helper stages."""

from __future__ import annotations

import re

from ironflow.local.sandbox import spawn


def test_the_worker_never_hands_the_helper_more_sources_than_it_stages() -> None:
    with open(spawn.ENTER_SOURCE) as f:
        source = f.read()
    found = re.search(r"^#define MAX_STAGED (\d+)$", source, re.MULTILINE)
    assert found is not None
    assert int(found.group(1)) == spawn.MAX_STAGED
