"""The seccomp BPF program, run through a small interpreter of the instructions it uses."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from ironflow.local.sandbox import seccomp

X86_64 = 0xC000003E
ALLOW, EPERM, ENOSYS, KILL = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000
CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = 0x10000000, 0x00020000, 17
CLONE, UNSHARE, CLONE3 = 56, 272, 435


def run(program: bytes, nr: int, arch: int = X86_64, arg0: int = 0) -> int:
    """Evaluate classic BPF (ld abs, jeq, jge, jset, ret) over ``struct seccomp_data``."""
    insns = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    data = {0: nr, 4: arch, 16: arg0 & 0xFFFFFFFF, 20: arg0 >> 32}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc, pc = data[k], pc + 1
        elif code == 0x15:
            pc = pc + 1 + (jt if acc == k else jf)
        elif code == 0x35:
            pc = pc + 1 + (jt if acc >= k else jf)
        elif code == 0x45:
            pc = pc + 1 + (jt if acc & k else jf)
        elif code == 0x06:
            return int(k)
        else:
            raise AssertionError(f"unexpected BPF opcode {code:#x}")


PROGRAM = seccomp.filter_program("x86_64")


def test_only_x86_64_is_covered() -> None:
    assert PROGRAM is not None
    assert seccomp.filter_program("aarch64") is None


def test_every_denied_call_gets_eperm() -> None:
    assert PROGRAM is not None
    for name, nr in seccomp.DENIED_X86_64.items():
        assert run(PROGRAM, nr) == EPERM, name


@given(st.integers(min_value=0, max_value=600))
def test_any_other_native_call_is_allowed(nr: int) -> None:
    assert PROGRAM is not None
    expected = EPERM if nr in seccomp.DENIED_X86_64.values() else ENOSYS if nr == CLONE3 else ALLOW
    assert run(PROGRAM, nr) == expected


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_a_new_user_namespace_is_refused_and_other_flags_pass(flags: int) -> None:
    for program in (PROGRAM, seccomp.filter_program("x86_64", denied={})):
        assert program is not None
        for nr in (CLONE, UNSHARE):
            assert run(program, nr, arg0=flags) == (EPERM if flags & CLONE_NEWUSER else ALLOW), (nr, hex(flags))
        assert run(program, CLONE3, arg0=flags) == ENOSYS  # its flags are out of reach: libc falls back to clone


def test_the_usual_clones_pass() -> None:
    assert PROGRAM is not None
    assert run(PROGRAM, CLONE, arg0=SIGCHLD) == ALLOW  # fork
    assert run(PROGRAM, CLONE, arg0=0x3D0F00) == ALLOW  # pthread_create
    assert run(PROGRAM, UNSHARE, arg0=CLONE_NEWNS) == ALLOW  # the kernel itself asks for a capability


def test_without_the_deny_list_only_the_namespace_rules_and_the_abi_hold() -> None:
    program = seccomp.filter_program("x86_64", denied={})
    assert program is not None
    assert [run(program, nr) for nr in seccomp.DENIED_X86_64.values()] == [ALLOW] * len(seccomp.DENIED_X86_64)
    assert run(program, 1, arch=0x40000003) == KILL


@given(st.integers(min_value=0, max_value=600))
def test_another_abi_kills_the_process(nr: int) -> None:
    assert PROGRAM is not None
    assert run(PROGRAM, nr, arch=0x40000003) == KILL  # i386
    assert run(PROGRAM, 0x40000000 | nr) == KILL  # x32
