"""The gVisor seccomp loader, run on the host in a child process (a filter cannot be taken back)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from ironflow.local import gvisor, seccomp, seccomp_exec

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter covers x86-64 only")

PROGRAM = seccomp.filter_program("x86_64", denied={})


def _loaded(*command: str, program: str | None = None) -> subprocess.CompletedProcess[str]:
    assert PROGRAM is not None
    hex_program = PROGRAM.hex() if program is None else program
    return subprocess.run(
        [sys.executable, "-I", "-S", seccomp_exec.__file__, hex_program, "--", *command],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_under_the_filter_a_new_user_namespace_is_refused_and_the_rest_runs() -> None:
    refused = _loaded("unshare", "--user", "true")
    assert refused.returncode == 1
    assert "Operation not permitted" in refused.stderr
    ran = _loaded("sh", "-c", "sleep 0 & wait; echo ran")
    assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr


@pytest.mark.parametrize("program", ["not-hex", "0600"])
def test_a_program_that_cannot_be_installed_is_the_sandboxs_failure(program: str) -> None:
    failed = _loaded("true", program=program)
    assert failed.returncode == 125
    assert failed.stderr.startswith(f"{gvisor.SETUP_FAILED}: seccomp filter: ")
    assert len(failed.stderr.splitlines()) == 1


def test_a_command_that_cannot_run_is_the_sandboxs_failure_too() -> None:
    failed = _loaded("/does/not/exist")
    assert failed.returncode == 125
    assert failed.stderr == f"{gvisor.SETUP_FAILED}: cannot run /does/not/exist: No such file or directory\n"
