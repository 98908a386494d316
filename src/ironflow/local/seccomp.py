"""A seccomp filter for the bubblewrap sandbox, as raw BPF (pure).

The pod runs with ``seccompProfile: RuntimeDefault``; this is the local counterpart: a
deny list of the system calls that default profile refuses to unprivileged containers
(kernel modules, mounts, kexec, keyrings, BPF, perf, ptrace, io_uring, clock and swap
changes…), answered with ``EPERM`` so a program that probes them falls back. A call
from another ABI (32-bit ``int 0x80``, x32) kills the process: the table below is only
correct for native x86-64 numbers.

Only x86-64 is covered; on another machine :func:`filter_program` returns None and the
sandbox runs without a filter (the provider logs it). bubblewrap reads the program from
a file descriptor (``--seccomp FD``) as an array of ``struct sock_filter``.

Rule table (x86-64 numbers):

==========================  ===============================================================
outcome                     system calls
==========================  ===============================================================
kill the process            any non x86-64 ABI (``AUDIT_ARCH`` mismatch, x32 bit set)
EPERM                       every name in :data:`DENIED_X86_64`
allowed                     everything else
==========================  ===============================================================
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

__all__ = ["DENIED_X86_64", "filter_program"]

#: Refused with EPERM: what Docker's default profile refuses without extra capabilities.
DENIED_X86_64: Final[Mapping[str, int]] = {
    "ptrace": 101,
    "syslog": 103,
    "uselib": 134,
    "ustat": 136,
    "sysfs": 139,
    "vhangup": 153,
    "pivot_root": 155,
    "_sysctl": 156,
    "adjtimex": 159,
    "acct": 163,
    "settimeofday": 164,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "lookup_dcookie": 212,
    "clock_settime": 227,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "perf_event_open": 298,
    "fanotify_init": 300,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "clock_adjtime": 305,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}

_LD_W_ABS: Final = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K: Final = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K: Final = 0x06  # BPF_RET | BPF_K
_AUDIT_ARCH_X86_64: Final = 0xC000003E
_X32_SYSCALL_BIT: Final = 0x40000000
_RET_KILL_PROCESS: Final = 0x80000000
_RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO_EPERM: Final = 0x00050000 | 1
_OFFSET_NR: Final = 0  # struct seccomp_data: int nr; __u32 arch; ...
_OFFSET_ARCH: Final = 4


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def filter_program(machine: str) -> bytes | None:
    """The BPF program for ``machine`` (``platform.machine()``), or None when not covered."""
    if machine not in ("x86_64", "amd64", "AMD64"):
        return None
    numbers = sorted(set(DENIED_X86_64.values()))
    n = len(numbers)
    # Layout: 0 ld arch, 1 jeq arch, 2 kill, 3 ld nr, 4 jge x32, 5..4+n jeq nr, 5+n allow, 6+n eperm, 7+n kill.
    program = [
        _insn(_LD_W_ABS, 0, 0, _OFFSET_ARCH),
        _insn(_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64),
        _insn(_RET_K, 0, 0, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, 0, 0, _OFFSET_NR),
        _insn(_JGE_K, n + 2, 0, _X32_SYSCALL_BIT),  # x32 ABI: to the last kill
    ]
    for index, number in enumerate(numbers):
        program.append(_insn(_JEQ_K, n - index, 0, number))
    program.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    program.append(_insn(_RET_K, 0, 0, _RET_ERRNO_EPERM))
    program.append(_insn(_RET_K, 0, 0, _RET_KILL_PROCESS))
    return b"".join(program)
