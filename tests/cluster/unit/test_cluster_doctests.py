"""The docstring examples of the runner-image and cluster-manifest modules run and hold."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from ironflow.cli import manifests
from ironflow.cluster import dockerfile, proxy_address, python_images, setup


@pytest.mark.parametrize(
    "module", [dockerfile, setup, proxy_address, python_images, manifests], ids=lambda m: m.__name__
)
def test_docstring_examples_hold(module: ModuleType) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0
    assert result.failed == 0
