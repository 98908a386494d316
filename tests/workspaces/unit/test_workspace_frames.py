"""Reading the workspace frame at the end of a pod's log: only the last line counts, a cut or
missing frame is an error (never an empty patch), the step's output comes back as printed."""

from __future__ import annotations

import base64
import json

import pytest

from ironflow import errors
from ironflow.workspaces import Change, WorkspaceChanges, frames
from ironflow.workspaces.frames import FRAME_PREFIX, parse_raw

A, B = "a" * 40, "b" * 40
RAW = (
    f":000000 100644 {'0' * 40} {A} A\0new.txt\0"
    f":100644 100644 {A} {B} M\0changed.txt\0"
    f":100644 000000 {A} {'0' * 40} D\0gone.txt\0"
    f":100644 100755 {A} {A} M\0tool.sh\0"
    f":100644 120000 {A} {B} T\0link\0"
).encode()
PATCH = b"diff --git a/new.txt b/new.txt\n..."


def split_frame(logs: str) -> tuple[str, WorkspaceChanges]:
    said, changes = frames.split_frame(logs)
    assert changes is not None
    return said, changes


def frame(patch: bytes = PATCH, raw: bytes = RAW, **extra: object) -> str:
    body = {"type": "ironflow_workspace", "version": 1}
    body.update(extra)
    if "error" not in extra:
        body["patch_base64"] = base64.b64encode(patch).decode()
        body["raw_base64"] = base64.b64encode(raw).decode()
    return json.dumps(body, separators=(",", ":"))


def test_the_frame_gives_the_patch_and_each_change_and_the_output_before_it() -> None:
    said, changes = split_frame("line one\nline two\n\n" + frame() + "\n")
    assert said == "line one\nline two\n"
    assert changes.patch == PATCH
    assert [(f.path, f.change) for f in changes.files] == [
        ("new.txt", Change.ADDED),
        ("changed.txt", Change.MODIFIED),
        ("gone.txt", Change.DELETED),
        ("tool.sh", Change.MODE),
        ("link", Change.MODIFIED),
    ]


def test_a_whole_frame_without_its_final_newline_is_read_as_a_followed_log_gives_it() -> None:
    said, changes = split_frame("out\n\n" + frame())
    assert (said, changes.patch) == ("out\n", PATCH)


def test_output_without_a_final_newline_and_no_output_at_all_come_back_as_printed() -> None:
    assert split_frame("partial\n" + frame() + "\n")[0] == "partial"
    assert split_frame("\n" + frame() + "\n")[0] == ""


def test_a_forged_frame_earlier_in_the_output_is_output_and_the_last_one_wins() -> None:
    forged = frame(patch=b"forged", raw=f":000000 100644 {'0' * 40} {A} A\0evil\0".encode())
    said, changes = split_frame(forged + "\n\n" + frame() + "\n")
    assert said == forged + "\n"
    assert changes.patch == PATCH


def test_output_after_the_frame_means_there_is_no_report() -> None:
    with pytest.raises(errors.WorkspaceUnsafe, match="report is missing"):
        split_frame("\n" + frame() + "\nprinted later\n")


@pytest.mark.parametrize("logs", ["", "just output\n", '{"type":"result"}\n'])
def test_no_frame_is_an_error_never_an_empty_patch(logs: str) -> None:
    with pytest.raises(errors.WorkspaceUnsafe, match="report is missing"):
        split_frame(logs)


def test_a_frame_cut_short_is_an_error() -> None:
    whole = frame()
    with pytest.raises(errors.WorkspaceUnsafe, match="cut short"):
        split_frame("\n" + whole[: len(whole) // 2])
    with pytest.raises(errors.WorkspaceUnsafe, match="cut short"):
        split_frame("\n" + whole[: len(whole) // 2] + "\n")


def test_the_pods_refusal_is_raised_with_its_words() -> None:
    with pytest.raises(errors.WorkspaceUnsafe, match="could not report its workspace: the patch is 9 bytes"):
        split_frame("\n" + frame(error="the patch is 9 bytes, over the pod's limit of 1 bytes") + "\n")


def test_an_unknown_version_or_bad_base64_is_refused() -> None:
    line = FRAME_PREFIX + ',"version":2,"patch_base64":"","raw_base64":""}'
    with pytest.raises(errors.WorkspaceUnsafe, match="unknown version"):
        split_frame(line + "\n")
    bad = FRAME_PREFIX + ',"version":1,"patch_base64":"!!","raw_base64":""}'
    with pytest.raises(errors.WorkspaceUnsafe, match="not base64"):
        split_frame(bad + "\n")


def test_a_patch_without_a_change_list_disagrees() -> None:
    with pytest.raises(errors.WorkspaceUnsafe, match="disagree"):
        split_frame(frame(raw=b"") + "\n")


def test_an_empty_frame_is_no_change() -> None:
    said, changes = split_frame("out\n\n" + frame(patch=b"", raw=b"") + "\n")
    assert (said, changes.patch, changes.files) == ("out\n", b"", ())


def test_raw_records_name_any_bytes_and_skip_git_internals() -> None:
    raw = f':000000 100644 {"0" * 40} {A} A\0caf\xc3\xa9 "q".txt\0:000000 100644 {"0" * 40} {A} A\0.git/x\0'
    assert [f.path for f in parse_raw(raw.encode("latin-1"))] == ['café "q".txt']


def test_a_gitlink_is_refused_as_a_nested_repository() -> None:
    raw = f":000000 160000 {'0' * 40} {A} A\0vendor/lib\0".encode()
    with pytest.raises(errors.WorkspaceUnsafe, match="nested git repository at 'vendor/lib'"):
        parse_raw(raw)


@pytest.mark.parametrize("raw", [b":100644 100644 x M\0p\0", b"nocolon a b c M\0p\0", f":1 2 {A} {A} M\0".encode()])
def test_a_record_git_did_not_write_is_refused(raw: bytes) -> None:
    with pytest.raises(errors.WorkspaceUnsafe):
        parse_raw(raw)


def test_a_workspace_without_git_reports_no_change_set() -> None:
    line = FRAME_PREFIX + ',"version":1,"git":false}'
    assert frames.split_frame("out\n\n" + line + "\n") == ("out\n", None)
