"""Inside a gVisor sandbox: install a seccomp filter, then run the sandbox's first command.

``runsc do`` starts its command without a filter and takes none from its caller, so this
script runs first, in gVisor's own kernel, as the sandbox's root: it sets ``no_new_privs``,
installs the BPF program of :mod:`ironflow.local.seccomp` for itself and everything it
starts, and execs the rest of its argv (the sandbox's setup, then the step).

Run as a standalone script (``python -I -S seccomp_exec.py HEX -- CMD…``): only the standard
library, nothing of ironflow, so it needs no package on the sandbox's path. A failure is the
sandbox's, not the step's: it says :data:`SETUP_FAILED` and exits 125, as the setup does.
"""

from __future__ import annotations

import os
import sys
from typing import Final

__all__ = ["SETUP_FAILED", "main"]

#: What the sandbox's setup prints (then exit 125) when one of its steps fails.
SETUP_FAILED: Final = "ironflow-sandbox: setup failed"
_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_SET_SECCOMP: Final = 22
_SECCOMP_MODE_FILTER: Final = 2
_INSN_BYTES: Final = 8


def _install(program: bytes) -> None:
    import ctypes  # here, not at the top: the pure modules import this one for SETUP_FAILED

    class _Fprog(ctypes.Structure):  # struct sock_fprog
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_char_p))

    libc = ctypes.CDLL(None, use_errno=True)
    fprog = _Fprog(len(program) // _INSN_BYTES, program)
    for what, args in (
        ("PR_SET_NO_NEW_PRIVS", (_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)),
        ("PR_SET_SECCOMP", (_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)),
    ):
        if libc.prctl(*args) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl({what}): {os.strerror(err)}")


def main(argv: list[str]) -> int:
    """``HEX -- CMD…``: install the filter, exec CMD; returns only when that failed (125)."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: seccomp_exec.py HEX -- CMD [ARGS...]", file=sys.stderr)
        return 2
    try:
        program = bytes.fromhex(argv[0])
        if not program or len(program) % _INSN_BYTES:
            raise ValueError("not a whole number of BPF instructions")
        _install(program)
    except ValueError as exc:
        return _failed(f"seccomp filter: {exc}")
    except OSError as exc:
        return _failed(f"seccomp filter: {exc.strerror}")
    try:
        os.execvp(argv[2], argv[2:])  # noqa: S606 - the sandbox's own command, exec'd under the filter
    except OSError as exc:
        return _failed(f"cannot run {argv[2]}: {exc.strerror}")


def _failed(reason: str) -> int:
    print(f"{SETUP_FAILED}: {reason}", file=sys.stderr)
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
