"""A ``PodRun`` for a plain command, shaped by a provider file (pure): what
``ironflow exec --backend k8s`` runs.

The command runs where the provider's agent steps run and as they run: its image,
namespace, pod labels, runtime class, node selector, working directory, limits, and
always the Pod Security ``restricted`` posture (``PodRun.restricted``: non-root uid,
no privilege escalation, every capability dropped, seccomp ``RuntimeDefault``, no
service-account token). A sandboxed provider's uid, read-only root and deadline margin
carry over; an unsandboxed one gets uid 10001 with a writable root — never less than
``restricted``, as the local backend never runs a command unsandboxed.

Not carried over, on purpose: env vars and Secret env (a command gets no credential),
volumes, the service account, the egress-profile label (no egress is granted), and the
cluster (the caller connects with ``provider.settings.cluster``). Nothing here does I/O.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from ironflow import errors
from ironflow.claude import layout
from ironflow.k8s import manifests, ops

if TYPE_CHECKING:
    from ironflow.k8s.provider import K8sEphemeralProvider

__all__ = ["EXEC_POD_PREFIX", "command_line", "exec_pod_run"]

#: Pods of ``ironflow exec`` are named ``exec-<unix ms hex>-<8 hex random>``.
EXEC_POD_PREFIX: Final = "exec"


def command_line(argv: Sequence[str]) -> str:
    """``argv`` as one ``/bin/sh -c`` line that runs exactly these words (each one quoted).

    >>> command_line(["sh", "-c", "echo $HOME; exit 7"])
    "sh -c 'echo $HOME; exit 7'"
    """
    if not argv:
        raise errors.ConfigError("missing command: ironflow exec [OPTIONS] -- CMD [ARGS...]")
    return shlex.join(argv)


def exec_pod_run(
    provider: K8sEphemeralProvider, argv: Sequence[str], *, timeout_s: float, now_ms: int, rand32: int
) -> ops.PodRun:
    """The ``PodRun`` that runs ``argv`` once with ``provider``'s placement and hardening.

    ``timeout_s`` bounds the wait and the pod's ``activeDeadlineSeconds`` (rounded up);
    ``now_ms`` and ``rand32`` name the pod (see :func:`manifests.generate_pod_name`).

    Raises:
        ConfigError: an empty command, a timeout that is not > 0, a label value
            Kubernetes refuses.
    """
    s = provider.settings
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise errors.ConfigError(f"timeout must be a finite number of seconds > 0, got {timeout_s!r}")
    name = manifests.generate_pod_name(now_ms, rand32, EXEC_POD_PREFIX)
    sandbox = s.sandbox
    uid = sandbox.run_as_user if sandbox is not None else layout.SANDBOX_UID
    read_only_root = sandbox is not None and not sandbox.writable_root
    run = (
        ops.PodRun(name, s.image, command_line(argv))
        .namespace(s.namespace)
        .restricted(uid, read_only_root=read_only_root)
        .timeout(timeout_s)
        .active_deadline_seconds(math.ceil(timeout_s))
    )
    if sandbox is not None:
        run = run.expiry_margin(sandbox.deadline_margin_s)
    if s.pod_labels:
        run = run.labels(s.pod_labels)
    if s.runtime_class is not None:
        run = run.runtime_class(s.runtime_class)
    if s.working_dir is not None:
        run = run.working_dir(s.working_dir)
    for key, value in s.node_selector.items():
        run = run.node_selector(key, value)
    if s.image_pull_secrets:
        run = run.image_pull_secret(s.image_pull_secrets[0])  # a PodRun carries one pull secret
    if s.resources.cpu_limit is not None or s.resources.memory_limit is not None:
        run = run.resources(ops.ResourceSpec(cpu_limit=s.resources.cpu_limit, memory_limit=s.resources.memory_limit))
    return run
