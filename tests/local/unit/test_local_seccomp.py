"""The seccomp BPF program, run through a small interpreter of the instructions it uses."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from ironflow.local import seccomp

X86_64 = 0xC000003E
ALLOW, EPERM, KILL = 0x7FFF0000, 0x00050001, 0x80000000


def run(program: bytes, nr: int, arch: int = X86_64) -> int:
    """Evaluate classic BPF (ld abs, jeq, jge, ret) over ``struct seccomp_data``."""
    insns = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    data = {0: nr, 4: arch}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc, pc = data[k], pc + 1
        elif code == 0x15:
            pc = pc + 1 + (jt if acc == k else jf)
        elif code == 0x35:
            pc = pc + 1 + (jt if acc >= k else jf)
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
    expected = EPERM if nr in seccomp.DENIED_X86_64.values() else ALLOW
    assert run(PROGRAM, nr) == expected


@given(st.integers(min_value=0, max_value=600))
def test_another_abi_kills_the_process(nr: int) -> None:
    assert PROGRAM is not None
    assert run(PROGRAM, nr, arch=0x40000003) == KILL  # i386
    assert run(PROGRAM, 0x40000000 | nr) == KILL  # x32
