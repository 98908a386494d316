"""The sandbox runner on a plain host process (no cgroup): what it reads, and what a timeout keeps."""

from __future__ import annotations

from pathlib import Path

from ironflow.local.sandbox import cgroups, launch, limits


class _Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def log(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))


def _processes() -> launch.SandboxProcesses:
    return launch.SandboxProcesses(cgroups.Support(0), limits.DEFAULT_LIMITS, host_uid=None)


async def test_a_line_longer_than_the_read_buffer_is_output_not_a_crash() -> None:
    sink = _Lines()
    script = "head -c 200000 /dev/zero | tr '\\0' a; echo; echo second; printf tail"
    finished = await _processes().run(["sh", "-c", script], stdin=None, limit_s=30, sink=sink)
    assert not finished.timed_out
    assert finished.code == 0
    assert finished.stdout == b"a" * 200000 + b"\nsecond\ntail"
    assert sink.lines == [("stdout", "a" * 200000), ("stdout", "second"), ("stdout", "tail")]


async def test_past_its_limit_the_tree_is_killed_and_what_it_wrote_is_kept(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = f"echo started; echo warn >&2; printf unterminated; sleep 30 & echo $! > {pid_file}; wait"
    finished = await _processes().run(["sh", "-c", script], stdin=None, limit_s=1, sink=None)
    assert finished.timed_out
    assert finished.stdout == b"started\nunterminated"
    assert finished.stderr == b"warn\n"
    assert _gone(int(pid_file.read_text())), "the tree outlived the call"


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # dead, not yet reaped
    except FileNotFoundError:
        return True
