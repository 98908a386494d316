"""The local sandbox itself: bubblewrap and gVisor argv, seccomp, cgroups and limits, launching the process."""

__all__: list[str] = []
