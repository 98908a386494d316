"""The plan of a local image build with no registry: recipes, cache keys and every argv (pure).

``scripts/images build`` (:mod:`ironflow.testing.images` does its I/O) builds the runner, the
auth proxy and the worker from ``docker/*/Dockerfile`` on a Debian 12 base made here by
``mmdebstrap``, through ``buildah``. This module decides what runs and under which name; it
never runs, reads or writes anything, so a unit test can check every command it would run.

The invariant (the tests check it on these argv): no image reference is ever resolved
remotely. Every ``buildah`` call runs inside a network namespace with no route out
(:func:`isolated`), every ``bud`` has ``--pull=never`` and ``--network=none``, and the base
reaches the Dockerfile as a build argument naming a local image. What an image installs is
fetched on the host first, by the ordinary clients: ``mmdebstrap --include`` (Debian
packages), ``pip download --require-hashes`` (the hash lock) and ``npm pack`` (the pinned CLI).

A cache key hashes what decides an image: its recipe, its Dockerfile and the repository files
its context copies, the lock, the CLI version and the base recipe. The fetched files are
named by those inputs (the lock's hashes, the CLI version, the base recipe), so the key is
known before anything is fetched: ``scripts/images path NAME`` needs no network.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ironflow.claude import cli
from ironflow.cluster import workloads

__all__ = [
    "BASES",
    "IMAGES",
    "IMPORT_CONTAINER",
    "MANYLINUX",
    "SOURCE_DATE_EPOCH",
    "BaseRecipe",
    "ImageRecipe",
    "base_key",
    "base_reference",
    "bud_argv",
    "cache_key",
    "import_base_argv",
    "isolated",
    "local_reference",
    "mmdebstrap_argv",
    "npm_pack_argv",
    "pip_download_argv",
    "push_argv",
    "sbom_commands",
]

#: File times and image dates of every build, so two builds of the same inputs agree.
SOURCE_DATE_EPOCH: Final = 1700000000
#: Debian 12 (glibc 2.36): the manylinux tags its pip accepts, newest first (as
#: scripts/lock-python-images.py ranks them when it hashes the lock).
MANYLINUX: Final = (*(f"manylinux_2_{minor}" for minor in range(36, 16, -1)), "manylinux2014")
_SUITE: Final = "bookworm"
_MIRRORS: Final = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
#: Trimmed from every base: manuals, documentation (the copyright files stay) and translations.
_DPKG_OPTIONS: Final = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
)
#: The base carries no apt sources: all it needs is included when it is made, and an
#: `apt-get update` inside a build with no network then has nothing to fetch and succeeds.
_NO_SOURCES_HOOK: Final = 'rm -f "$1"/etc/apt/sources.list; rm -rf "$1"/etc/apt/sources.list.d/*'
#: The working container of a base import.
IMPORT_CONTAINER: Final = "ironflow-base-import"
_PATH: Final = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class BaseRecipe:
    """A Debian 12 root filesystem made by mmdebstrap: the variant and the packages it includes."""

    name: str
    variant: str
    packages: tuple[str, ...]


@dataclass(frozen=True)
class ImageRecipe:
    """One image: its reference, Dockerfile, build context, base (as the build argument) and inputs.

    ``context`` is the repository directory the Dockerfile's ``COPY`` reads from; ``copies``
    the files and directories under it that the build context holds (nothing else is copied);
    ``imports`` repository directories from elsewhere put in the context, each under its name there;
    ``fetched`` is ``wheels`` (pip, into ``docker/wheels/``) or ``npm`` (into ``npm/``).
    """

    name: str
    reference: str
    dockerfile: str
    context: str
    copies: tuple[str, ...]
    base: BaseRecipe
    base_arg: str
    fetched: str
    build_args: tuple[tuple[str, str], ...] = ()
    #: The numeric USER the image ends on (what a pod's runAsUser asserts).
    user: str = f"{workloads.UID}:{workloads.UID}"
    imports: tuple[tuple[str, str], ...] = ()


_PYTHON_BASE: Final = BaseRecipe(
    "python", "essential", ("python3", "python3-venv", "python-is-python3", "passwd", "ca-certificates")
)
#: nodejs 18 from Debian: Claude Code's package asks for node >= 22 but its CLI is a native
#: binary that node only copies into place at install time (npm warns, the version check passes).
_NODE_BASE: Final = BaseRecipe("node", "apt", ("nodejs", "npm", "git", "curl", "ca-certificates", "passwd"))
BASES: Final = {b.name: b for b in (_PYTHON_BASE, _NODE_BASE)}
_PYTHON_COPIES: Final = ("pyproject.toml", "README.md", "LICENSE", "src", "docker/requirements.lock")


def _python_image(name: str, reference: str) -> ImageRecipe:
    """An image of ironflow itself (auth proxy, worker): its wheelhouse, no index, reproducible bytecode."""
    return ImageRecipe(
        name=name,
        reference=reference,
        dockerfile=f"docker/{name}/Dockerfile",
        context=".",
        copies=_PYTHON_COPIES,
        base=_PYTHON_BASE,
        base_arg="PYTHON_BASE",
        fetched="wheels",
        build_args=(("PIP_NO_INDEX", "1"), ("SOURCE_DATE_EPOCH", str(SOURCE_DATE_EPOCH))),
    )


IMAGES: Final = {
    "runner": ImageRecipe(
        name="runner",
        reference=workloads.DEFAULT_RUNNER_IMAGE,
        dockerfile="docker/claude-runner/Dockerfile",
        context="docker/claude-runner",
        copies=("Dockerfile", "CLAUDE_CODE_VERSION", "IMAGE_TAG"),
        base=_NODE_BASE,
        base_arg="NODE_BASE",
        fetched="npm",
        build_args=(("CLAUDE_CODE_VERSION", cli.CLAUDE_CODE_VERSION),),
        # The session runtime, a session pod's main process (ironflow.k8s.sessions.runtime_pod).
        imports=(("src/ironflow/sandbox_runtime", "sandbox-runtime"),),
    ),
    "auth-proxy": _python_image("auth-proxy", workloads.DEFAULT_AUTH_PROXY_IMAGE),
    "worker": _python_image("worker", workloads.DEFAULT_WORKER_IMAGE),
}


def local_reference(reference: str) -> str:
    """The fully qualified name an unqualified reference has on a node (``docker.io/library/…``).

    The kubelet and containerd expand ``ironflow-worker:0.1.0`` so; an archive tagged with the
    expanded name is found under the name the manifests use.

    >>> local_reference("ironflow-worker:0.1.0")
    'docker.io/library/ironflow-worker:0.1.0'
    >>> local_reference("ghcr.io/acme/runner:1")
    'ghcr.io/acme/runner:1'
    """
    first, slash, _ = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return reference
    return f"docker.io/{reference}" if slash else f"docker.io/library/{reference}"


def _digest(*parts: str) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(part.encode())
        sha.update(b"\0")
    return sha.hexdigest()


def base_key(base: BaseRecipe, arch: str) -> str:
    """What names a base: its whole mmdebstrap command (packages, mirrors, trims, hook) and the arch."""
    return _digest("base-v1", arch, *mmdebstrap_argv(base, output="-"))[:16]


def base_reference(base: BaseRecipe, arch: str) -> str:
    """The local name of a base image; ``localhost/`` so no resolver ever looks for it elsewhere."""
    return f"localhost/ironflow-base-{base.name}:{base_key(base, arch)}"


def cache_key(recipe: ImageRecipe, *, arch: str, files: Mapping[str, str], lock: str) -> str:
    """The content key of an image: its recipe, the base's key, the sha256 of every context file, the lock.

    ``files`` maps each context path (relative to the context) to its sha256; the order does not
    matter. The CLI version rides in the recipe's build arguments.
    """
    listed = [f"{path}={files[path]}" for path in sorted(files)]
    args = [f"{k}={v}" for k, v in recipe.build_args]
    return _digest("image-v1", recipe.name, recipe.reference, arch, base_key(recipe.base, arch), lock, *args, *listed)[
        :16
    ]


def mmdebstrap_argv(base: BaseRecipe, *, output: str) -> list[str]:
    """Make the base's root filesystem as a tarball from the Debian archive (on the host, with network)."""
    argv = ["mmdebstrap", f"--variant={base.variant}", "--mode=root", "--format=tar", "--quiet"]
    argv.append("--include=" + ",".join(base.packages))
    argv += [f"--dpkgopt={option}" for option in _DPKG_OPTIONS]
    argv += [f"--customize-hook={_NO_SOURCES_HOOK}", _SUITE, output, *_MIRRORS]
    return argv


def pip_download_argv(*, lock: str, dest: str, arch: str) -> list[str]:
    """Fetch the hash lock's wheels for the images' CPython 3.11 on Debian 12, whatever the host runs.

    Only wheels (the images build nothing), and the platform tags pip on the image would rank
    first, so the hashes the lock lists for that platform are the ones checked.
    """
    argv = ["-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--require-hashes", "--no-deps"]
    argv += ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp"]
    argv += ["--abi", "cp311", "--abi", "abi3", "--abi", "none"]
    for tag in MANYLINUX:
        argv += ["--platform", f"{tag}_{arch}"]
    return [*argv, "--dest", dest, "-r", lock]


def npm_pack_argv(*, version: str, arch: str, cache: str) -> list[str]:
    """Fetch the pinned CLI and its platform package as tarballs (``npm pack`` into the working directory)."""
    platform = {"x86_64": "x64", "aarch64": "arm64"}.get(arch, arch)
    package = "@anthropic-ai/claude-code"
    return [
        "npm",
        "pack",
        "--silent",
        "--cache",
        cache,
        f"{package}@{version}",
        f"{package}-linux-{platform}@{version}",
    ]


def isolated(argv: Sequence[str]) -> list[str]:
    """Run a command in a new network namespace (only a down loopback: no route out) and mount namespace.

    The mounts buildah makes die with the namespace, so none is left behind on the host.
    """
    return ["unshare", "--net", "--mount", "--propagation", "private", *argv]


def import_base_argv(buildah: Sequence[str], *, tarball: str, reference: str) -> list[list[str]]:
    """Turn the base's tarball into a local image: ``from scratch`` + ``add`` + ``config`` + ``commit``.

    The working container has a fixed name (:data:`IMPORT_CONTAINER`): a stale one from an
    interrupted run is removed first by the caller.
    """
    container = IMPORT_CONTAINER
    return [
        [*buildah, "from", "--pull=never", "--name", container, "scratch"],
        [*buildah, "add", container, tarball, "/"],
        [*buildah, "config", "--env", _PATH, "--cmd", "/bin/sh", container],
        [*buildah, "commit", "--quiet", "--rm", "--timestamp", str(SOURCE_DATE_EPOCH), container, reference],
    ]


def bud_argv(
    buildah: Sequence[str], recipe: ImageRecipe, *, arch: str, dockerfile: str, context: str, tag: str
) -> list[str]:
    """Build one image from its own Dockerfile, the base passed as the build argument it declares."""
    argv = [*buildah, "bud", "--pull=never", "--network=none", "--quiet"]
    argv += ["--timestamp", str(SOURCE_DATE_EPOCH), "--file", dockerfile, "--tag", tag]
    argv += ["--build-arg", f"{recipe.base_arg}={base_reference(recipe.base, arch)}"]
    for name, value in recipe.build_args:
        argv += ["--build-arg", f"{name}={value}"]
    return [*argv, context]


def push_argv(buildah: Sequence[str], *, tag: str, archive: str, digest_file: str) -> list[str]:
    """Export an image as a docker archive that ``ctr -n k8s.io images import`` loads under ``tag``."""
    return [*buildah, "push", "--quiet", "--digestfile", digest_file, tag, f"docker-archive:{archive}:{tag}"]


def sbom_commands(recipe: ImageRecipe) -> list[tuple[str, str]]:
    """What the SBOM lists, as (title, shell command run inside the image with no network)."""
    commands = [("debian packages", "dpkg-query -W -f '${Package} ${Version} ${Architecture}\\n'")]
    if recipe.fetched == "wheels":
        commands.append(("python packages (/opt/ironflow)", "/opt/ironflow/bin/python -m pip list --format=freeze"))
    else:
        commands.append(("npm packages (global)", "npm ls --global --all"))
        commands.append(("claude --version", "claude --version"))
    return commands
