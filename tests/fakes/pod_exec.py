"""Run a rendered pod's containers for real, in bubblewrap, with the pod's own volume layout.

Why: the kube test servers play pod phases and scripted logs; a git workspace's pod is only
proven when the very scripts its manifest holds run. :func:`run_pod` runs each init
container, then the main one, each with its ``command``, ``env``, ``workingDir`` and mounts
(an emptyDir is a host directory shared by the containers that mount it, a ConfigMap its
keys' files, ``readOnly`` a read-only bind), a fresh ``/tmp``, the host's ``/usr`` and ``/etc`` read-only, the main
container as its PID 1, and the host's network (to reach a proxy on loopback). It returns
the main container's log (stdout and stderr as the kubelet merges them) and exit code, which
a test then scripts the fake kubelet with.

``extra_binds`` maps host paths to paths in every container (e.g. a fake ``claude``).
Nothing else of the host is visible; the run is bounded by ``timeout_s``.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PodRun", "run_pod"]


@dataclass(frozen=True)
class PodRun:
    """How the pod ended: the main container's merged log and exit code (None: an init container failed)."""

    log: str
    exit_code: int | None
    init_logs: tuple[str, ...]


def _argv(
    container: Mapping[str, Any], volumes: Mapping[str, Path], binds: Mapping[str, str], *, pid1: bool
) -> list[str]:
    argv = ["bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for link in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{link}"):
            argv += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for source, target in binds.items():
        argv += ["--ro-bind", source, target]
    for mount in container.get("volumeMounts", []):
        flag = "--ro-bind" if mount.get("readOnly") else "--bind"
        argv += [flag, str(volumes[mount["name"]] / mount.get("subPath", "")), mount["mountPath"]]
    if container.get("workingDir"):
        argv += ["--chdir", container["workingDir"]]
    if pid1:
        argv.append("--as-pid-1")
    return [*argv, *container["command"]]


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def run_pod(pod: Mapping[str, Any], root: Path, *, extra_binds: Mapping[str, str] | None = None,
            configmaps: Mapping[str, Mapping[str, Any]] | None = None, claims: Mapping[str, Path] | None = None,
            empty_dirs: Mapping[str, Path] | None = None, timeout_s: float = 60) -> PodRun:  # fmt: skip
    """Run ``pod``'s init containers, then its first container; each emptyDir under ``root``
    (or the existing directory ``empty_dirs`` names for it, e.g. where an exec already wrote),
    each ConfigMap volume (from ``configmaps``, by name) as its keys' files, each claim the
    directory ``claims`` names for it."""
    spec = pod["spec"]
    volumes: dict[str, Path] = {}
    for volume in spec.get("volumes", []):
        if "persistentVolumeClaim" in volume:
            volumes[volume["name"]] = (claims or {})[volume["persistentVolumeClaim"]["claimName"]]
            continue
        if volume["name"] in (empty_dirs or {}):
            volumes[volume["name"]] = (empty_dirs or {})[volume["name"]]
            continue
        place = root / volume["name"]
        place.mkdir(parents=True)
        volumes[volume["name"]] = place
        if "configMap" in volume:
            found = (configmaps or {})[volume["configMap"]["name"]]
            for key, text in (found.get("data") or {}).items():
                (place / key).write_text(text)
            for key, encoded in (found.get("binaryData") or {}).items():
                (place / key).write_bytes(base64.b64decode(encoded))
        else:
            assert "emptyDir" in volume, f"only emptyDir and configMap volumes run here, not {volume}"
    binds = dict(extra_binds or {})
    init_logs: list[str] = []
    for container in spec.get("initContainers", []):
        done = subprocess.run(
            _argv(container, volumes, binds, pid1=False), env=_env(container), capture_output=True, text=True,
            timeout=timeout_s, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        init_logs.append(done.stdout + done.stderr)
        if done.returncode != 0:
            return PodRun("", None, tuple(init_logs))
    main = spec["containers"][0]
    done = subprocess.run(
        _argv(main, volumes, binds, pid1=True), env=_env(main), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return PodRun(done.stdout, done.returncode, tuple(init_logs))
