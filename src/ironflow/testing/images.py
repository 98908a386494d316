"""Build the images here with no registry, cached by content: the I/O of ``scripts/images``.

:mod:`ironflow.cluster.image_builds` decides every command; this module runs them. Two phases:
*fetch* (on the host, with network, by the ordinary clients: mmdebstrap from the Debian
archive, ``pip download --require-hashes``, ``npm pack``) and *build* (``buildah``, each call
in a fresh network namespace with no route out, ``--pull=never``, ``--network=none``). After a
fetch, a build needs no network at all: the integration test runs it inside ``unshare --net``.

Everything lives under ``${XDG_CACHE_HOME:-~/.cache}/ironflow/images`` (or
``$IRONFLOW_IMAGES_CACHE``): the bases' tarballs, the fetched files, buildah's own storage and
one entry per image key (``<name>/<key>/``: the docker archive, the SBOM, ``image.json``). A
lock file makes a concurrent build wait, then use what the first one built. Nothing is written
into the repository: the build context is assembled in the cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from ironflow.cluster import image_builds
from ironflow.testing._cached_tools import tool_path

__all__ = [
    "TOOLS",
    "BuiltImage",
    "ImagesNotAvailable",
    "archive_path",
    "build",
    "buildah_argv",
    "cache_dir",
    "fetch",
    "missing_tools",
]

#: The host commands a build runs (Debian packages: mmdebstrap, buildah, runc, util-linux, npm).
TOOLS: Final = ("mmdebstrap", "buildah", "runc", "unshare", "npm")
#: Entries kept per image (the newest), e.g. a branch's and main's.
_KEPT: Final = 3
_SKIPPED: Final = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


class ImagesNotAvailable(RuntimeError):
    """A tool the build needs is missing, or the build is not run as root; the message says which."""


@dataclass(frozen=True)
class BuiltImage:
    """One built image: its name on a node, its content digest, and where its archive and SBOM are."""

    name: str
    reference: str
    image_id: str
    manifest_digest: str
    archive: str
    sbom: str
    key: str
    seconds: float
    cached: bool


def cache_dir() -> Path:
    return tool_path("IRONFLOW_IMAGES_CACHE", "images")


def missing_tools() -> list[str]:
    """What keeps a build from running here (tools absent, not root), empty when it can run."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if os.geteuid() != 0:
        missing.append("root (mmdebstrap --mode=root and buildah's storage)")
    return missing


def buildah_argv() -> list[str]:
    """``buildah`` with the cache's own storage, so the host's container storage is never touched."""
    root = cache_dir()
    return ["buildah", "--root", str(root / "storage"), "--runroot", str(root / "run"), "--storage-driver", "overlay"]


def _arch() -> str:
    return platform.machine()


def _context_files(repo: Path, recipe: image_builds.ImageRecipe) -> dict[str, Path]:
    """Each file of the build context (path relative to the context) and where it is in the repository."""
    base = repo / recipe.context
    files: dict[str, Path] = {}
    sources = [(base / copy, base, "") for copy in recipe.copies]
    sources += [(repo / source, repo / source, f"{into}/") for source, into in recipe.imports]
    for source, root, prefix in sources:
        if source.is_file():
            files[prefix + source.relative_to(root).as_posix()] = source
            continue
        for directory, subdirs, names in os.walk(source):
            subdirs[:] = sorted(d for d in subdirs if d not in _SKIPPED)
            for name in names:
                if not name.endswith(".pyc"):
                    path = Path(directory, name)
                    files[prefix + path.relative_to(root).as_posix()] = path
    return files


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _key(repo: Path, recipe: image_builds.ImageRecipe) -> str:
    files = {rel: _sha256(path) for rel, path in _context_files(repo, recipe).items()}
    files["<dockerfile>"] = _sha256(repo / recipe.dockerfile)
    lock = (repo / "docker" / "requirements.lock").read_text(encoding="utf-8") if recipe.fetched == "wheels" else ""
    return image_builds.cache_key(recipe, arch=_arch(), files=files, lock=lock)


def _entry(repo: Path, name: str) -> Path:
    return cache_dir() / name / _key(repo, image_builds.IMAGES[name])


def archive_path(repo: Path, name: str) -> Path:
    """Where the docker archive of image ``name`` built from this tree is (it may not be built yet)."""
    return _entry(repo, name) / "image.tar"


@contextmanager
def _locked() -> Iterator[None]:
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _run(argv: Sequence[str], log: Callable[[str], None], *, cwd: Path | None = None) -> str:
    done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log(done.stdout[-4000:] + done.stderr[-4000:])
        raise subprocess.CalledProcessError(done.returncode, list(argv), done.stdout, done.stderr)
    return done.stdout


def _timed(what: str, log: Callable[[str], None]) -> Callable[[], None]:
    start = time.monotonic()
    log(f"{what}...")
    return lambda: log(f"{what}: {time.monotonic() - start:.1f}s")


def _fetch_base(base: image_builds.BaseRecipe, log: Callable[[str], None]) -> Path:
    tarball = cache_dir() / "bases" / f"{base.name}-{image_builds.base_key(base, _arch())}.tar"
    if tarball.exists():
        return tarball
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".tar.partial")
    done = _timed(f"mmdebstrap {base.name} base", log)
    env_argv = ["env", f"SOURCE_DATE_EPOCH={image_builds.SOURCE_DATE_EPOCH}"]
    # A mount namespace of its own: the chroot's /proc and /dev mounts cannot outlive it.
    _run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            *env_argv,
            *image_builds.mmdebstrap_argv(base, output=str(partial)),
        ],
        log,
    )
    partial.rename(tarball)
    done()
    return tarball


def _fetch_inputs(repo: Path, recipe: image_builds.ImageRecipe, log: Callable[[str], None]) -> Path:
    """The fetched files of an image, in a directory named by what decides them."""
    if recipe.fetched == "wheels":
        lock = repo / "docker" / "requirements.lock"
        target = cache_dir() / "inputs" / f"wheels-{_arch()}-{_sha256(lock)[:16]}"
        if not target.exists():
            done = _timed("pip download of docker/requirements.lock", log)
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            argv = image_builds.pip_download_argv(lock=str(lock), dest=str(partial), arch=_arch())
            _run([sys.executable, *argv], log)
            partial.rename(target)
            done()
        return target
    version = dict(recipe.build_args)["CLAUDE_CODE_VERSION"]
    target = cache_dir() / "inputs" / f"npm-{_arch()}-{version}"
    if not target.exists():
        done = _timed(f"npm pack of Claude Code {version}", log)
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        cache = cache_dir() / "inputs" / "npm-cache"
        _run(image_builds.npm_pack_argv(version=version, arch=_arch(), cache=str(cache)), log, cwd=partial)
        partial.rename(target)
        done()
    return target


def fetch(repo: Path, names: Sequence[str], *, log: Callable[[str], None]) -> None:
    """Fetch on the host (with network) everything the images ``names`` install; cached, so seconds when done."""
    with _locked():
        for name in names:
            recipe = image_builds.IMAGES[name]
            _fetch_base(recipe.base, log)
            _fetch_inputs(repo, recipe, log)


def _assemble(repo: Path, recipe: image_builds.ImageRecipe, inputs: Path, into: Path) -> None:
    """The build context: the repository files the Dockerfile copies, plus the fetched files (hard links)."""
    for rel, source in _context_files(repo, recipe).items():
        (into / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, into / rel)
    fetched = into / ("docker/wheels" if recipe.fetched == "wheels" else "npm")
    fetched.mkdir(parents=True, exist_ok=True)
    for path in sorted(inputs.iterdir()):
        os.link(path, fetched / path.name)


def _image_id(reference: str) -> str | None:
    """The ``sha256:…`` content digest of a local image, or None when there is none by that name."""
    argv = image_builds.isolated(
        [*buildah_argv(), "inspect", "--type", "image", "--format", "{{.FromImageID}}", reference]
    )
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return f"sha256:{done.stdout.strip()}" if done.returncode == 0 else None


def _import_base(base: image_builds.BaseRecipe, log: Callable[[str], None]) -> None:
    reference = image_builds.base_reference(base, _arch())
    if _image_id(reference) is not None:
        return
    tarball = _fetch_base(base, log)
    done = _timed(f"import of the {base.name} base", log)
    buildah = buildah_argv()
    subprocess.run(
        image_builds.isolated([*buildah, "rm", image_builds.IMPORT_CONTAINER]), capture_output=True, check=False
    )
    for argv in image_builds.import_base_argv(buildah, tarball=str(tarball), reference=reference):
        _run(image_builds.isolated(argv), log)
    done()


def _sbom(recipe: image_builds.ImageRecipe, tag: str, out: Path, log: Callable[[str], None]) -> None:
    """The image's inventory, from inside it with no network: Debian packages, then pip or npm."""
    buildah = buildah_argv()
    container = f"ironflow-sbom-{recipe.name}"
    subprocess.run(image_builds.isolated([*buildah, "rm", container]), capture_output=True, check=False)
    _run(image_builds.isolated([*buildah, "from", "--pull=never", "--name", container, tag]), log)
    try:
        parts = [f"# {tag}\n"]
        for title, command in image_builds.sbom_commands(recipe):
            run = [*buildah, "run", "--network=none", container, "--", "sh", "-c", command]
            parts.append(f"\n## {title}\n" + _run(image_builds.isolated(run), log))
        out.write_text("".join(parts), encoding="utf-8")
    finally:
        subprocess.run(image_builds.isolated([*buildah, "rm", container]), capture_output=True, check=False)


def _build_one(repo: Path, name: str, *, rebuild: bool, log: Callable[[str], None]) -> BuiltImage:
    start = time.monotonic()
    recipe = image_builds.IMAGES[name]
    entry = _entry(repo, name)
    tag = image_builds.local_reference(recipe.reference)
    record = entry / "image.json"
    cached = json.loads(record.read_text(encoding="utf-8")) if record.exists() and not rebuild else None
    # The name may now be another tree's build (the storage is shared): a hit needs this very image.
    if cached is not None and _image_id(tag) == cached["image_id"]:
        return BuiltImage(**{**cached, "seconds": round(time.monotonic() - start, 2), "cached": True})
    _import_base(recipe.base, log)
    inputs = _fetch_inputs(repo, recipe, log)
    shutil.rmtree(entry, ignore_errors=True)
    entry.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix=f"context-{name}-", dir=cache_dir()) as context:
        _assemble(repo, recipe, inputs, Path(context))
        done = _timed(f"buildah bud of {name}", log)
        argv = image_builds.bud_argv(
            buildah_argv(), recipe, arch=_arch(), dockerfile=str(repo / recipe.dockerfile), context=context, tag=tag
        )
        _run(image_builds.isolated(argv), log)
        done()
    done = _timed(f"export of {name}", log)
    push = image_builds.push_argv(
        buildah_argv(), tag=tag, archive=str(entry / "image.tar"), digest_file=str(entry / "manifest-digest")
    )
    _run(image_builds.isolated(push), log)
    done()
    _sbom(recipe, tag, entry / "sbom.txt", log)
    image_id = _image_id(tag)
    built = BuiltImage(
        name=name,
        reference=tag,
        image_id=image_id or "",
        manifest_digest=(entry / "manifest-digest").read_text(encoding="utf-8").strip(),
        archive=str(entry / "image.tar"),
        sbom=str(entry / "sbom.txt"),
        key=entry.name,
        seconds=round(time.monotonic() - start, 2),
        cached=False,
    )
    record.write_text(json.dumps(asdict(built), indent=2) + "\n", encoding="utf-8")
    _prune(entry.parent)
    return built


def _prune(image_dir: Path) -> None:
    """Keep the newest :data:`_KEPT` entries of an image (other trees may build other keys), and no
    untagged image in buildah's storage: the cache does not grow with every edit."""
    entries = sorted((e for e in image_dir.iterdir() if e.is_dir()), key=lambda e: e.stat().st_mtime, reverse=True)
    for old in entries[_KEPT:]:
        shutil.rmtree(old, ignore_errors=True)
    subprocess.run(image_builds.isolated([*buildah_argv(), "rmi", "--prune"]), capture_output=True, check=False)


def build(repo: Path, names: Sequence[str], *, rebuild: bool = False, log: Callable[[str], None]) -> list[BuiltImage]:
    """Build ``names`` (fetching what is missing first); an image whose key is cached is seconds.

    ``rebuild`` builds the images again from their cached bases and fetched files.

    Raises:
        ImagesNotAvailable: a tool is missing or not root, naming each.
    """
    missing = missing_tools()
    if missing:
        raise ImagesNotAvailable(
            f"cannot build images here: missing {', '.join(missing)} (as root: bash scripts/install --test)"
        )
    with _locked():
        return [_build_one(repo, name, rebuild=rebuild, log=log) for name in names]


def _print_built(built: BuiltImage) -> None:
    how = "cached" if built.cached else "built"
    print(f"{built.reference}  {built.image_id}  ({how} in {built.seconds:.1f}s)")
    print(f"  manifest {built.manifest_digest}")
    print(f"  archive  {built.archive}")
    print(f"  sbom     {built.sbom}")


def _main(argv: list[str]) -> int:
    """``scripts/images COMMAND [NAME…]``: build, fetch, path or names (see scripts/images)."""
    repo = Path.cwd()
    command, *rest = argv or ["build"]
    rebuild = "--rebuild" in rest
    names = [n for n in rest if n != "--rebuild"] or list(image_builds.IMAGES)
    unknown = [n for n in names if n not in image_builds.IMAGES]
    if unknown or command not in {"build", "fetch", "path", "names"}:
        print(
            f"error: unknown {'image ' + ', '.join(unknown) if unknown else 'command ' + command} "
            f"(images: {', '.join(image_builds.IMAGES)}; commands: build, fetch, path, names)",
            file=sys.stderr,
        )
        return 2

    def log(line: str) -> None:
        print(f"images: {line}", file=sys.stderr, flush=True)

    if command == "names":
        for recipe in image_builds.IMAGES.values():
            print(f"{recipe.name} {image_builds.local_reference(recipe.reference)}")
    elif command == "path":
        for name in names:
            print(archive_path(repo, name))
    elif command == "fetch":
        fetch(repo, names, log=log)
    else:
        try:
            for built in build(repo, names, rebuild=rebuild, log=log):
                _print_built(built)
        except ImagesNotAvailable as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
