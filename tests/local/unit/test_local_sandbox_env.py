"""The sandbox's environment: what is refused, and how it reaches bubblewrap (never its own environment
or argv); and the mounts that would uncover what the bubblewrap sandbox hides (issue 34 M1, L10)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import errors
from ironflow.local.sandbox import bwrap, environment


@pytest.mark.parametrize(
    "name",
    ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_ANYTHING", "GLIBC_TUNABLES", "GCONV_PATH", "LOCPATH", "TZDIR"],
)
def test_variables_that_steer_the_loader_or_libc_are_refused_by_name(name: str) -> None:
    with pytest.raises(errors.StepConfigError, match=f"env {name} is refused: LD_\\*, GLIBC_TUNABLES") as info:
        environment.sandbox_env({name: "/secret-looking/value.so"})
    assert "value.so" not in str(info.value)


@pytest.mark.parametrize("name", ["TMPDIR", "LANG", "MY_LD_PRELOAD", "ld_preload", "LDFLAGS"])
def test_other_variables_pass(name: str) -> None:
    assert environment.sandbox_env({name: "x"})[name] == "x"


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"1A": "x"}, "invalid env name '1A'"),
        ({"A=B": "x"}, "invalid env name 'A=B'"),
        ({"": "x"}, "invalid env name ''"),
        ({"A": "x\0--setenv\0LD_PRELOAD\0/x.so"}, "env A holds a NUL byte"),
        ({f"V{i}": "x" for i in range(environment.MAX_ENV_VARIABLES + 1)}, "at most 1024"),
    ],
)
def test_what_no_environment_can_carry_is_refused_in_one_line(env: dict[str, str], words: str) -> None:
    with pytest.raises(errors.StepConfigError, match=words) as info:
        environment.sandbox_env(env)
    assert "\n" not in str(info.value)
    assert "setenv" not in str(info.value)


def _split(data: bytes) -> list[str]:
    assert data.endswith(b"\0")
    return [a.decode() for a in data[:-1].split(b"\0")]


@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
        st.text(st.characters(min_codepoint=1, max_codepoint=0xD7FF), max_size=30),
        max_size=8,
    )
)
def test_env_args_clear_then_set_exactly_the_environment(env: dict[str, str]) -> None:
    args = _split(bwrap.env_args(env))
    assert args[0] == "--clearenv"
    triples = [args[i : i + 3] for i in range(1, len(args), 3)]
    assert all(t[0] == "--setenv" for t in triples)
    assert {t[1]: t[2] for t in triples} == env


@pytest.mark.parametrize("env", [{"A": "1\0--setenv"}, {"A\0B": "1"}, {"A=B": "1"}, {"": "1"}])
def test_env_args_refuse_what_would_read_as_more_arguments(env: dict[str, str]) -> None:
    with pytest.raises(errors.ConfigError, match="cannot go to the sandbox"):
        bwrap.env_args(env)


def test_bwrap_reads_the_environment_from_its_fd_first_and_no_value_is_on_the_argv() -> None:
    base = bwrap.BwrapSettings(command=("sh", "-c", "true"), root_entries=(bwrap.HostEntry("usr", is_dir=True),))
    argv = bwrap.bwrap_argv(dataclasses.replace(base, env_fd=7, seccomp_fd=6))
    assert argv[1:3] == ["--args", "7"]
    assert "--setenv" not in argv
    assert "--clearenv" not in argv
    assert "--args" not in bwrap.bwrap_argv(base)


@pytest.mark.parametrize(
    ("target", "masked"),
    [
        ("/etc", "/etc/"),
        ("/etc/", "/etc/"),
        ("/etc/shadow", "/etc/shadow"),
        ("/etc/gshadow", "/etc/gshadow"),
        ("/etc/ironflow/x", "/etc/ironflow"),
        ("/run", "/run/ironflow"),
        ("/home", "/home/claude"),
    ],
)
def test_a_mount_that_would_uncover_a_mask_is_refused(target: str, masked: str) -> None:
    for kind, field in (("read-only volume", "read_only_mounts"), ("writable volume", "writable_mounts")):
        shown = bwrap.ReadOnlyMount if field == "read_only_mounts" else bwrap.WritableMount
        values: dict[str, object] = {field: (shown("/srv/x", target),)}
        with pytest.raises(errors.ConfigError, match=f"{kind} cannot be mounted at '{target}'") as info:
            bwrap.bwrap_argv(bwrap.BwrapSettings(command=("true",), root_entries=(), **values))  # type: ignore[arg-type]
        assert masked in str(info.value)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("target", ["/etc/ssl", "/data", "/run/user-data", "/home2", "/etcetera", "/srv/etc"])
def test_a_mount_beside_the_masks_is_kept(target: str) -> None:
    argv = bwrap.bwrap_argv(
        bwrap.BwrapSettings(command=("true",), root_entries=(), read_only_mounts=(bwrap.ReadOnlyMount("/s", target),))
    )
    assert ["--ro-bind", "/s", target] == argv[argv.index("/s") - 1 : argv.index("/s") + 2]


def test_with_a_gate_the_user_namespace_comes_through_it_so_an_empty_gate_is_refused() -> None:
    base = bwrap.BwrapSettings(command=("true",), root_entries=(bwrap.HostEntry("usr", is_dir=True),))
    gated = bwrap.bwrap_argv(dataclasses.replace(base, env_fd=7))
    assert "--unshare-user" not in gated
    assert "--unshare-all" not in gated
    assert "--disable-userns" in gated  # bubblewrap refuses it without --unshare-user
    args = _split(bwrap.gate_args({"A": "1"}))
    assert args == ["--unshare-all", "--unshare-user", "--clearenv", "--setenv", "A", "1"]
