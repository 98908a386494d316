"""The one mount rule every backend applies to a step's own mounts (issue 19, item 7): the
operator's managed settings, the sandbox's HOME and /tmp, the profile and prompt mounts and
the ``PATH`` cannot be covered, at the path or beneath it, under any spelling, nor hidden by a
mount at a directory above it (issue 33: ``/etc`` hid ``/etc/claude-code``)."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow.claude import layout


@pytest.mark.parametrize(
    "path",
    [
        "/etc/claude-code",
        "/etc/claude-code/managed-settings.json",
        "/home/claude/.claude",
        "/home/claude/.claude/settings.json",
        "/usr/local/bin",
        "/usr/local/bin/claude",
        "/tmp",
        "/tmp/x",
        "/etc/ironflow/claude-profile/0",
        "/mnt/ironflow-prompt",
        "/proc/self",
        "/dev/shm",
        "/run/ironflow/auth-proxy.sock",
        "/var/run/secrets/kubernetes.io/serviceaccount",
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "/",
        "//",
        "/etc/claude-code/",
    ],
)
def test_a_reserved_path_or_one_beneath_it_is_refused(path: str) -> None:
    assert layout.mount_path_problem("read-only volume", path) == (
        f"read-only volume cannot be mounted at reserved path '{path}'"
    )


@pytest.mark.parametrize(
    ("path", "hidden"),
    [
        ("/etc", "/etc/claude-code"),
        ("/etc/", "/etc/claude-code"),
        ("/etc/ironflow", "/etc/ironflow/claude-profile"),
        ("/usr", "/usr/local/bin"),
        ("/usr/local", "/usr/local/bin"),
        ("/home", "/home/claude"),
        ("/var", layout.SERVICE_ACCOUNT_TOKEN_DIR),
        ("/var/run/secrets", layout.SERVICE_ACCOUNT_TOKEN_DIR),
        ("/run", "/run/ironflow"),
        ("/mnt", "/mnt/ironflow-prompt"),
    ],
)
def test_a_parent_of_a_reserved_path_is_refused_as_hiding_it(path: str, hidden: str) -> None:
    assert layout.mount_path_problem("read-only volume", path) == (
        f"read-only volume cannot be mounted at '{path}': it would hide reserved path '{hidden}'"
    )


@pytest.mark.parametrize("path", ["/tmp/../etc/claude-code", "/data/./x", "/data//x", "/a/.."])
def test_another_spelling_is_refused_by_its_segments(path: str) -> None:
    problem = layout.mount_path_problem("PVC volume", path)
    assert problem == f"PVC volume mount_path must not contain empty, '.' or '..' segments, got '{path}'"


def test_a_relative_path_is_refused_and_an_ordinary_one_passes() -> None:
    assert layout.mount_path_problem("PVC volume", "data") == "PVC volume mount_path must be absolute, got 'data'"
    for path in ("/data/repos", "/workspace", "/data/repos/", "/homeX", "/usr/local/share"):
        assert layout.mount_path_problem("PVC volume", path) is None


_SEGMENT = st.sampled_from(["", ".", "..", "etc", "claude-code", "home", "claude", ".claude", "tmp", "data", "x"])


@given(st.lists(_SEGMENT, min_size=1, max_size=6))
def test_no_accepted_path_reaches_a_reserved_one(segments: list[str]) -> None:
    path = "/" + "/".join(segments)
    if layout.mount_path_problem("volume", path) is None:
        norm = posixpath.normpath(path)
        assert not any(norm == r or norm.startswith(r + "/") for r in layout.RESERVED_MOUNT_PATHS)
        assert not any(r.startswith(norm + "/") for r in layout.RESERVED_MOUNT_PATHS)
        assert norm == path.rstrip("/")
