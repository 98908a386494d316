"""Both local runtimes refuse the same unusable command and tmpfs sizes, with the same words."""

from __future__ import annotations

import pytest

from ironflow import errors
from ironflow.local.sandbox import bwrap, gvisor

ROOT = (bwrap.HostEntry("usr", is_dir=True),)

BAD = [
    ({"command": ()}, "the sandbox needs a command to run"),
    ({"home_size_bytes": 0}, "home size limit must be a positive number of bytes, got 0"),
    ({"tmp_size_bytes": -1}, "tmp size limit must be a positive number of bytes, got -1"),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_bwrap_and_gvisor_refuse_the_same_settings(change: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"command": ("true",), **change}
    with pytest.raises(errors.ConfigError) as bw:
        bwrap.bwrap_argv(bwrap.BwrapSettings(root_entries=ROOT, **fields))  # type: ignore[arg-type]
    with pytest.raises(errors.ConfigError) as gv:
        gvisor.setup_script(gvisor.GvisorSettings(**fields))  # type: ignore[arg-type]
    assert str(bw.value) == str(gv.value) == message


def test_positive_sizes_and_a_command_pass() -> None:
    mounts = gvisor.tmpfs_mounts(gvisor.GvisorSettings(command=("true",), home_size_bytes=1, tmp_size_bytes=1))
    assert "size=1" in mounts[1]["options"]
    assert bwrap.bwrap_argv(bwrap.BwrapSettings(command=("true",), root_entries=ROOT))[-1] == "true"
