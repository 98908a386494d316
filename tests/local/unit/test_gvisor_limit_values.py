"""gVisor's limits as values (issue 34, L8): runsc gets no host file size limit, the step's are
in the spec, and a kernel that died for want of host tasks is named (pure)."""

from __future__ import annotations

import resource

from ironflow.local.sandbox import gvisor
from ironflow.local.sandbox.limits import SandboxLimits, oci_rlimits, rlimits

LIMITS = SandboxLimits(pids=300, open_files=512, file_size_bytes=64 << 20)


def test_runsc_gets_no_file_size_limit_and_the_step_gets_it_in_the_spec() -> None:
    assert (resource.RLIMIT_FSIZE, 64 << 20) in rlimits(LIMITS, nproc=False, data=False)
    assert rlimits(LIMITS, nproc=False, data=False, gvisor=True) == ((resource.RLIMIT_NOFILE, 512),)
    spec = gvisor.oci_spec(gvisor.GvisorSettings(command=("true",), limits=LIMITS), {})
    assert (
        spec["process"]["rlimits"]
        == oci_rlimits(LIMITS)
        == [
            {"type": "RLIMIT_NOFILE", "hard": 512, "soft": 512},
            {"type": "RLIMIT_FSIZE", "hard": 64 << 20, "soft": 64 << 20},
        ]
    )


def test_a_dead_kernel_leaves_its_panic_on_stderr() -> None:
    argv = gvisor.gvisor_argv(gvisor.GvisorSettings(command=("true",)), "/t/gvisor")
    assert {"--panic-log=/dev/stderr", "--traceback=single"} <= set(argv[: argv.index("run")])


def test_a_kernel_that_died_for_want_of_host_tasks_is_named() -> None:
    line = b"\n" + gvisor.OUT_OF_TASKS.format(pids=300).encode() + b"\n"
    panic = b"step output\npanic: error initializing first thread: resource temporarily unavailable\n\ngoroutine 9"
    fatal = b"runtime: failed to create new OS thread (have 78 already; errno=11)\nruntime: may need to increase"
    assert gvisor.kernel_death(2, panic, 300) == line
    assert gvisor.kernel_death(2, fatal, 300) == line
    assert gvisor.kernel_death(0, panic, 300) == b""  # a step that printed the words and went on
    assert gvisor.kernel_death(2, b"sh: 1: Cannot fork\n", 300) == b""
    assert b"300 host tasks" in line


def test_any_kernel_panic_after_the_cgroup_refused_a_task_is_named() -> None:
    """Where a failed clone surfaces in gVisor's kernel varies (seen: "trying to use inactive address
    space?" from the ptrace platform): the cgroup's own count of refused tasks says why it died."""
    line = b"\n" + gvisor.OUT_OF_TASKS.format(pids=512).encode() + b"\n"
    panic = b"panic: trying to use inactive address space?\n\ngoroutine 404 [running]:\ngvisor.dev/gvisor/pkg/sentry/mm"
    assert gvisor.kernel_death(2, panic, 512, refused=3) == line
    assert gvisor.kernel_death(2, panic, 512, refused=0) == b""  # a panic for another reason is not called this
    assert gvisor.kernel_death(2, b"sh: 1: Cannot fork\n", 512, refused=3) == b""  # no kernel death: no panic
    assert gvisor.kernel_death(1, panic, 512, refused=3) == b""
