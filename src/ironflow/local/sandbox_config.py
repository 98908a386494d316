"""The local sandbox's settings: read, checked and turned into the shape every sandbox takes.

:class:`LocalSandboxConfig` is the configuration half of
:class:`~ironflow.local.sandbox_provider.LocalSandboxProvider`, which inherits it and runs
steps and commands: a value that can never work is refused at construction with
:class:`~ironflow.errors.ConfigError`, a step's read-only mounts at invocation with
:class:`~ironflow.errors.StepConfigError`. It starts no sandbox; it sets up the supervisor
that will (``processes``), sweeps the temp dirs a killed worker left, and says which
credential the in-process proxy holds (never handed to a sandbox).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import resource
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

from ironflow import errors
from ironflow._renamed import renamed_argument
from ironflow.captured import DEFAULT_KEEP_BYTES
from ironflow.claude import cli, layout
from ironflow.local import workdirs
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import bwrap, cgroups, environment, identity, launch
from ironflow.local.sandbox import limits as sandbox_limits
from ironflow.secrets import Secret

if TYPE_CHECKING:
    from ironflow.auth_proxy import relays as relays_mod
    from ironflow.auth_proxy.git_hosts import GitHosts
    from ironflow.egress import EgressPolicy
    from ironflow.local.sandbox import docker_engine
    from ironflow.local.workspaces.kept import KeptWorkspaces
    from ironflow.steps import AgentConfig

__all__ = ["DEFAULT_TIMEOUT_S", "LocalSandboxConfig"]

log = logging.getLogger("ironflow.local")


def _resolved(relays: Sequence[relays_mod.RelaySpec | relays_mod.Relay]) -> tuple[relays_mod.Relay, ...]:
    """The provider's relays, each spec's credential read from its variable; the relays' module (and
    its token types) loads only for a provider that has some."""
    from ironflow.auth_proxy import relays as relays_mod

    found = relays_mod.clash(r if isinstance(r, relays_mod.RelaySpec) else r.spec for r in relays)
    if found is not None:
        raise errors.ConfigError(f"relays[{found[0]}].{found[1]}: {found[2]}")
    specs = [r for r in relays if isinstance(r, relays_mod.RelaySpec)]
    resolved = iter(relays_mod.resolve_env(specs, os.environ))
    return tuple(r if isinstance(r, relays_mod.Relay) else next(resolved) for r in relays)


#: The nproc limit a Podman sandbox gets at most: what Podman's own process keeps.
_PODMAN_NPROC: Final = 32768

DEFAULT_TIMEOUT_S: Final = 600.0


class LocalSandboxConfig:
    """The settings of a local sandbox provider, checked when it is built.

    Args:
        isolation: ``"bwrap"``, ``"gvisor"`` (``runsc``) or ``"docker"`` (a Docker or Podman daemon, which
            must answer and hold ``docker_image`` now, or :class:`~ironflow.errors.ConfigError`).
        docker_image: under ``"docker"``, the local image steps run in (never pulled); default the runner
            image ``scripts/images build`` makes.
        timeout: seconds a step may run; past it the whole process tree is killed.
        credential: the key the in-process proxy injects; None reads the worker's
            ``CLAUDE_CODE_OAUTH_TOKEN`` then ``ANTHROPIC_API_KEY`` at invocation (§6.8).
        managed_settings: a managed-settings document mounted read-only at /etc/claude-code.
        managed_settings_presets: named documents a step picks with
            ``AgentConfig.managed_settings(name)`` (the local counterpart of preset ConfigMaps).
        profiles: host directories copied into ``~/.claude`` before the CLI starts.
        env: extra plain variables for the sandbox (credential names are refused).
        allow_bypass: the ``IRONFLOW_ALLOW_BYPASS`` decision; None reads the worker's env.
        conversations_dir: a host directory kept as ``~/.claude/projects`` (Claude Code's
            conversations) across steps, so ``resume_session_id`` finds its conversation (bubblewrap
            only; the pod's conversations claim). ``sessions_dir`` is its old name (warns).
        temp_dir: where each run's temp dir (settings, proxy socket) is made; default the
            system's. Keep it short: a unix socket path holds at most 107 bytes. The ones left
            there by a worker that was killed are removed at start (:mod:`ironflow.local.workdirs`).
        limits: what each sandbox may use (processes, memory, CPU, open files, file size);
            :meth:`limits_report` says which hold on this machine and how.
        sandbox_host_uid: on a root worker, the non-root host uid a bubblewrap sandbox runs as
            (so root-only host files stay unreadable); ignored otherwise.
        git_hosts: the git hosts' credentials (kept in the proxy) for git workspaces.
        relays: hosts every step reaches through the in-process proxy with a credential it injects
            (:mod:`ironflow.auth_proxy.relays`; the sandbox gets ``IRONFLOW_RELAY_<NAME>`` and
            ``…_TOKEN``); a spec's ``credential_env`` is read from the worker's environment now.
        relay_upstream: send ``/r/<host>/…`` to ``<relay_upstream>/<host>/…`` instead of
            ``https://<host>/…`` (a mirror, or a test's loopback server).
        output_keep_bytes: bytes of the start, and of the end, of each stream a command's result
            keeps; the rest is counted, not held (``CommandResult.stdout_cut``).
        egress: what every step, agent or command, may reach through the egress proxy
            (:mod:`ironflow.egress`; ``HTTP(S)_PROXY`` in the sandbox); ``None`` or a policy
            without allow rules: nothing but the model and the relays.
    """

    def __init__(
        self,
        *,
        isolation: environment.Isolation = "bwrap",
        timeout: float = DEFAULT_TIMEOUT_S,
        credential: environment.ProxyCredential | None = None,
        managed_settings: Mapping[str, Any] | None = None,
        managed_settings_presets: Mapping[str, Mapping[str, Any]] | None = None,
        profiles: Sequence[environment.LocalProfile] = (),
        env: Mapping[str, str] | None = None,
        home_size_bytes: int = bwrap.DEFAULT_HOME_SIZE_BYTES,
        tmp_size_bytes: int = bwrap.DEFAULT_TMP_SIZE_BYTES,
        claude_path: str | None = None,
        allow_bypass: bool | None = None,
        conversations_dir: str | None = None,
        sessions_dir: str | None = None,
        temp_dir: str | None = None,
        limits: sandbox_limits.SandboxLimits = sandbox_limits.DEFAULT_LIMITS,
        sandbox_host_uid: int = identity.DEFAULT_HOST_UID,
        git_hosts: GitHosts | None = None,
        output_keep_bytes: int = DEFAULT_KEEP_BYTES,
        relays: Sequence[relays_mod.RelaySpec | relays_mod.Relay] = (),
        relay_upstream: str | None = None,
        egress: EgressPolicy | None = None,
        docker_image: str | None = None,
    ) -> None:
        if isolation not in ("bwrap", "gvisor", "docker"):
            raise errors.ConfigError(f"isolation must be 'bwrap', 'gvisor' or 'docker', got '{isolation}'")
        if docker_image is not None and isolation != "docker":
            raise errors.ConfigError(f"docker_image is for isolation 'docker', not '{isolation}'")
        if not timeout > 0:
            raise errors.ConfigError(f"timeout must be a positive number of seconds, got {timeout}")
        if profiles:
            _check_profiles(profiles)
        bwrap.check_size("home_size_bytes", home_size_bytes)
        bwrap.check_size("tmp_size_bytes", tmp_size_bytes)
        for label, doc in [("managed_settings", managed_settings), *(managed_settings_presets or {}).items()]:
            try:
                json.dumps(doc)
            except (TypeError, ValueError) as exc:
                raise errors.ConfigError(f"managed settings '{label}' is not JSON: {exc}") from None
        environment.sandbox_env(env)  # refuse credential variables now, not at the first step
        sandbox_limits.check_limits(limits)
        if isinstance(output_keep_bytes, bool) or not isinstance(output_keep_bytes, int) or output_keep_bytes < 0:
            raise errors.ConfigError(f"output_keep_bytes must be a whole number of bytes, got {output_keep_bytes!r}")
        self.output_keep_bytes = output_keep_bytes
        identity.check_host_uid(sandbox_host_uid)
        # A root worker's bubblewrap sandbox runs as a non-root host uid; gVisor's kernel judges files itself.
        self._host_uid = sandbox_host_uid if os.geteuid() == 0 and isolation == "bwrap" else None
        # Who must own what the sandbox writes: on a root worker, the uid the step writes as (gVisor's
        # gofer and a container write the host as the step's own uid); None on a non-root worker.
        self._writable_uid = (
            self._host_uid if isolation == "bwrap" else layout.SANDBOX_UID if os.geteuid() == 0 else None
        )
        self.docker_image = docker_image
        engine: docker_engine.DockerEngine | None = None
        if isolation == "docker":  # the daemon and its image, checked now: no step finds them missing
            from ironflow.local.sandbox import docker_engine

            self.docker_image = docker_image or docker_engine.DEFAULT_IMAGE
            engine = docker_engine.DockerEngine.from_environment()
            engine.check(self.docker_image)
        self.isolation: environment.Isolation = isolation
        self.timeout = float(timeout)
        self.credential = credential
        self.managed_settings = None if managed_settings is None else dict(managed_settings)
        self.managed_settings_presets = {k: dict(v) for k, v in (managed_settings_presets or {}).items()}
        self.profiles = tuple(profiles)
        self.env = dict(env or {})
        self.home_size_bytes = home_size_bytes
        self.tmp_size_bytes = tmp_size_bytes
        self.claude_path = claude_path
        self.allow_bypass = allow_bypass
        if temp_dir is not None and not os.path.isdir(temp_dir):
            raise errors.ConfigError(f"temp_dir '{temp_dir}' is not a directory; create it or leave temp_dir unset")
        self.temp_dir = temp_dir
        where = "ironflow.local.LocalSandboxProvider"
        kept = renamed_argument(where, "sessions_dir", sessions_dir, "conversations_dir", conversations_dir)
        if kept is not None:
            identity.check_conversations_dir(kept, bubblewrap=isolation == "bwrap", host_uid=self._host_uid)
        self.conversations_dir = kept
        self.limits = limits
        self._git_hosts = git_hosts
        self.relays = _resolved(relays) if relays else ()
        self.relay_upstream = relay_upstream
        self.egress = egress
        #: The running sandboxes (their cgroups, limits and run ids); sessions start theirs here too.
        bounded = launch.within_file_table(limits, host_processes=isolation != "gvisor")
        self.processes = launch.SandboxProcesses(
            cgroups.probe(), bounded, host_uid=self._host_uid, gvisor=isolation == "gvisor", containers=engine
        )
        self._docker_path = engine.docker_path if engine is not None else "docker"
        # Podman's: what its own process keeps (it lowers itself to 32768), or the worker's if lower; a
        # limit it is not given it raises to its maximum, which a host without CAP_SYS_RESOURCE refuses.
        hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        nproc = _PODMAN_NPROC if hard == resource.RLIM_INFINITY else min(hard, _PODMAN_NPROC)
        self._podman_nproc = nproc if engine is not None and engine.podman else None
        # The temp dirs and kept workspaces of workers that were killed before they could clean up.
        workdirs.sweep(temp_dir, (workdirs.PREFIX, workdirs.KEPT_PREFIX))
        log.info("local sandbox limits: %s", self.limits_report())

    @property
    def git_hosts(self) -> GitHosts:
        """The git hosts' credentials (kept in the proxy) for git workspaces."""
        if self._git_hosts is None:  # the workspaces' modules load with a workspace, not with a plain command
            from ironflow.auth_proxy.git_hosts import GitHosts

            self._git_hosts = GitHosts()
        return self._git_hosts

    @functools.cached_property
    def kept(self) -> KeptWorkspaces:
        """Workspaces kept for a retry of their step (``keep_on_retry``), made at their first use."""
        from ironflow.local.workspaces.kept import KeptWorkspaces

        return KeptWorkspaces(self.temp_dir)

    def limits_report(self) -> str:
        """Which per-sandbox limits hold on this machine, and by what mechanism (one line)."""
        if self.isolation == "docker":
            return (
                "docker: the daemon holds them (--pids-limit, --memory without swap, --cpu-quota or --cpu-shares, "
                "--ulimit nofile and fsize); kill by docker rm --force"
            )
        return self.processes.support.describe()

    def shape(self) -> sandbox_argv.SandboxShape:
        """What every sandbox of this provider is made of (its sessions' too)."""
        return sandbox_argv.SandboxShape(
            self.isolation,
            self.profiles,
            self.home_size_bytes,
            self.tmp_size_bytes,
            self.conversations_dir,
            self._host_uid,
            self._writable_uid,
            self.limits,
            self.docker_image if self.isolation == "docker" else None,
            self._docker_path,
            self._podman_nproc,
        )

    def claude_cli(self) -> str:
        """The Claude Code CLI's real file: inside the sandbox only its package directory is shown. In a
        Docker sandbox, the image's own (on its PATH): the host's is not there."""
        if self.isolation == "docker":
            return "claude"
        return os.path.realpath(self.claude_path or cli.find_claude_cli())

    def bypass_allowed(self) -> bool:
        """Whether a step may skip permission prompts: the provider's word, else the worker's environment."""
        return self.allow_bypass if self.allow_bypass is not None else os.environ.get(layout.ALLOW_BYPASS_ENV) == "1"

    def proxy_credential(self) -> environment.ProxyCredential:
        """The credential the in-process proxy holds for a sandbox session's agent steps."""
        return self._credential(None)

    def _credential(self, config: AgentConfig | None) -> environment.ProxyCredential:
        base = self.credential
        upstream = base.upstream if base is not None else "https://api.anthropic.com"
        if config is not None and config.account is not None:
            kind: Literal["api_key", "oauth_token"] = (
                "api_key" if config.account.credential_kind == "api_key" else "oauth_token"
            )
            return environment.ProxyCredential(config.account.value, kind, upstream)
        if base is not None:
            return base
        if os.environ.get("CLAUDE_CODE_OAUTH_TOKEN"):
            return environment.ProxyCredential(Secret(os.environ["CLAUDE_CODE_OAUTH_TOKEN"]), "oauth_token", upstream)
        if os.environ.get("ANTHROPIC_API_KEY"):
            return environment.ProxyCredential(Secret(os.environ["ANTHROPIC_API_KEY"]), "api_key", upstream)
        raise errors.MissingCredential(
            "no credential: attach a Provider Account or set CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_API_KEY"
        )

    def _step_mounts(self, config: AgentConfig) -> tuple[bwrap.ReadOnlyMount, ...]:
        from ironflow.step_sandbox import HostPathSource, validate_sub_path  # an agent step's values

        mounts: list[bwrap.ReadOnlyMount] = []
        for vol in config.pod.read_only_volumes:
            if not isinstance(vol.source, HostPathSource):
                continue
            if vol.sub_path is not None and (reason := validate_sub_path(vol.sub_path)) is not None:
                raise errors.StepConfigError(f"read-only volume: {reason}")
            source = vol.source.path if vol.sub_path is None else os.path.join(vol.source.path, vol.sub_path)
            if not os.path.isdir(source):
                raise errors.StepConfigError(
                    f"read-only host path '{source}' is not a directory on this machine; "
                    "create it or drop read_only_host_path from the step"
                )
            mount = bwrap.ReadOnlyMount(source, vol.mount_path)
            problem = sandbox_argv.mount_problem(self.isolation, mount)
            if problem is not None:
                raise errors.StepConfigError(problem)
            mounts.append(mount)
        return tuple(mounts)


def _check_profiles(profiles: Sequence[environment.LocalProfile]) -> None:
    """Each profile's subdir is one Claude Code reads and its directory exists (or a ConfigError)."""
    from ironflow.claude import profile  # a provider with profiles: a plain command loads none

    for p in profiles:
        reason = profile.validate_profile_subdir(p.subdir)
        if reason is not None:
            raise errors.ConfigError(f"invalid claude profile subdir '{p.subdir}': {reason}")
        if not os.path.isdir(p.path):
            raise errors.ConfigError(f"claude profile directory '{p.path}' does not exist; create it or drop it")
