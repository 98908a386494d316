"""A seccomp filter for the local sandboxes, as raw BPF (pure).

The pod runs with ``seccompProfile: RuntimeDefault``; this is the local counterpart: a
deny list of the system calls that default profile refuses to unprivileged containers
(kernel modules, mounts, kexec, keyrings, BPF, perf, ptrace, io_uring, clock and swap
changes, and what reaches into another process: ``process_vm_*``, ``pidfd_getfd``,
``process_madvise``…), answered with ``EPERM`` so a program that probes them falls back, and, as that
profile does, no new user namespace: an agent needs none, and inside one an unprivileged
process reaches much of the kernel that otherwise needs a capability. A call from another
ABI (32-bit ``int 0x80``, x32) kills the process: the table below is only correct for
native x86-64 numbers.

Only x86-64 is covered; on another machine :func:`filter_program` returns None and the
sandbox runs without a filter (the provider logs it). bubblewrap reads the program from
a file descriptor (``--seccomp FD``) as an array of ``struct sock_filter``. gVisor takes the
user-namespace rules as an OCI ``linux.seccomp`` section (:func:`oci_user_namespace_rules`;
not the deny list: gVisor's own kernel answers those calls, and the sandbox's setup must
mount), so both runtimes refuse a nested user namespace the same way.

Rule table (x86-64 numbers):

==========================  ===============================================================
outcome                     system calls
==========================  ===============================================================
kill the process            any non x86-64 ABI (``AUDIT_ARCH`` mismatch, x32 bit set)
EPERM                       every name in ``denied`` (default :data:`DENIED_X86_64`), among
                            them ``ptrace``, ``process_vm_readv``/``writev``, ``pidfd_getfd``
                            and ``process_madvise`` (another process's memory or fds)
EPERM                       :data:`NEW_USER_NAMESPACE_X86_64` with ``CLONE_NEWUSER`` in flags
ENOSYS                      :data:`ENOSYS_X86_64` (``clone3``: libc falls back to ``clone``)
allowed                     everything else
==========================  ===============================================================
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["DENIED_X86_64", "ENOSYS_X86_64", "NEW_USER_NAMESPACE_X86_64", "filter_program", "oci_user_namespace_rules"]

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
    "pidfd_getfd": 438,
    "process_madvise": 440,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}

#: Refused with EPERM when their first argument (the flags) asks for a new user namespace.
NEW_USER_NAMESPACE_X86_64: Final[Mapping[str, int]] = {"clone": 56, "unshare": 272}
#: Answered ENOSYS, as by the default profile: ``clone3`` takes its flags in memory a filter
#: cannot read, so it could make a user namespace; libc then falls back to ``clone``.
ENOSYS_X86_64: Final[Mapping[str, int]] = {"clone3": 435}

_LD_W_ABS: Final = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K: Final = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K: Final = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K: Final = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K: Final = 0x06  # BPF_RET | BPF_K
_AUDIT_ARCH_X86_64: Final = 0xC000003E
_X32_SYSCALL_BIT: Final = 0x40000000
_CLONE_NEWUSER: Final = 0x10000000
_RET_KILL_PROCESS: Final = 0x80000000
_RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO: Final = 0x00050000
_EPERM: Final = 1
_ENOSYS: Final = 38
_OFFSET_NR: Final = 0  # struct seccomp_data: int nr; __u32 arch; __u64 ip; __u64 args[6]
_OFFSET_ARCH: Final = 4
_OFFSET_ARG0_LOW: Final = 16  # the low 32 bits of args[0] (little-endian): where CLONE_NEWUSER is

#: One instruction, its jump targets by label (or ``None``: the next instruction).
_Insn = tuple[int, str | None, str | None, int]


def _assemble(program: list[_Insn | str]) -> bytes:
    """Classic BPF from instructions and labels (a str entry names the instruction after it;
    jumps go forward only, as the kernel requires)."""
    labels: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)

    def offset(index: int, label: str | None) -> int:
        return 0 if label is None else labels[label] - index - 1

    return b"".join(
        struct.pack("<HBBI", code, offset(i, jt), offset(i, jf), k) for i, (code, jt, jf, k) in enumerate(insns)
    )


def filter_program(machine: str, denied: Mapping[str, int] = DENIED_X86_64) -> bytes | None:
    """The BPF program for ``machine`` (``platform.machine()``), or None when not covered.

    ``denied`` are the calls answered EPERM outright; the user-namespace rules always hold.
    """
    if machine not in ("x86_64", "amd64", "AMD64"):
        return None
    program: list[_Insn | str] = [
        (_LD_W_ABS, None, None, _OFFSET_ARCH),
        (_JEQ_K, None, "kill", _AUDIT_ARCH_X86_64),
        (_LD_W_ABS, None, None, _OFFSET_NR),
        (_JGE_K, "kill", None, _X32_SYSCALL_BIT),
    ]
    program += [(_JEQ_K, "eperm", None, nr) for nr in sorted(set(denied.values()))]
    program += [(_JEQ_K, "flags", None, nr) for nr in sorted(set(NEW_USER_NAMESPACE_X86_64.values()))]
    program += [(_JEQ_K, "enosys", None, nr) for nr in sorted(set(ENOSYS_X86_64.values()))]
    program += [
        (_RET_K, None, None, _RET_ALLOW),
        "flags",
        (_LD_W_ABS, None, None, _OFFSET_ARG0_LOW),
        (_JSET_K, "eperm", None, _CLONE_NEWUSER),
        (_RET_K, None, None, _RET_ALLOW),
        "eperm",
        (_RET_K, None, None, _RET_ERRNO | _EPERM),
        "enosys",
        (_RET_K, None, None, _RET_ERRNO | _ENOSYS),
        "kill",
        (_RET_K, None, None, _RET_KILL_PROCESS),
    ]
    return _assemble(program)


def oci_user_namespace_rules() -> dict[str, Any]:
    """The user-namespace rules as an OCI ``linux.seccomp`` section (by name: any machine),
    for gVisor, whose own kernel answers the deny list's calls. ``clone3`` is left out: this
    gVisor release answers it ENOSYS itself, and ignores ``errnoRet`` (its EPERM would stop
    libc's fallback to ``clone`` and with it every new thread)."""
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {
                "names": sorted(NEW_USER_NAMESPACE_X86_64),
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": _EPERM,
                "args": [{"index": 0, "value": _CLONE_NEWUSER, "valueTwo": _CLONE_NEWUSER, "op": "SCMP_CMP_MASKED_EQ"}],
            },
        ],
    }
