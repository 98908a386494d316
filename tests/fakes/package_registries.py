"""A Python package index (PEP 503 simple) and an npm registry on loopback over TLS, each serving
one tiny package built here, so real ``pip install`` and ``npm install`` run against them.

Why: a proxy that breaks a package manager (its CONNECT, its SNI, its certificate checks) only
shows with the real client. Strict: any other path is 404, and every request's path is kept in
:attr:`PackageRegistries.paths`, so a test can tell that a refused install reached nothing.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import ssl
import tarfile
import zipfile
from types import TracebackType
from typing import Final

from aiohttp import web

__all__ = ["NPM_PACKAGE", "PYPI_PACKAGE", "PackageRegistries", "tiny_tarball", "tiny_wheel"]

#: The one package each registry serves (version 1.0.0), and what importing or requiring it says.
PYPI_PACKAGE: Final = "ironflow-tiny"
NPM_PACKAGE: Final = "ironflow-tiny"
GREETING: Final = "hello from the tiny package"


def tiny_wheel() -> tuple[str, bytes]:
    """A pure-Python wheel of :data:`PYPI_PACKAGE` 1.0.0 (module ``ironflow_tiny``): its file name and bytes."""
    dist = "ironflow_tiny-1.0.0.dist-info"
    files = {
        "ironflow_tiny/__init__.py": f"GREETING = {GREETING!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PYPI_PACKAGE}\nVersion: 1.0.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: ironflow-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return "ironflow_tiny-1.0.0-py3-none-any.whl", out.getvalue()


def tiny_tarball() -> bytes:
    """An npm package tarball of :data:`NPM_PACKAGE` 1.0.0 (``package/`` inside, as ``npm pack`` makes)."""
    files = {
        "package/package.json": json.dumps({"name": NPM_PACKAGE, "version": "1.0.0", "main": "index.js"}),
        "package/index.js": f"module.exports = {json.dumps(GREETING)};\n",
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class PackageRegistries:
    """Both registries on ``host`` while open (``async with``): ``{url}/simple/`` is the index,
    ``{url}/npm/`` the npm registry. ``tls`` is a server context whose certificate names ``host``."""

    def __init__(self, host: str, tls: ssl.SSLContext) -> None:
        self.host = host
        self._tls = tls
        self.url = ""
        self.paths: list[str] = []
        self._wheel = tiny_wheel()
        self._tarball = tiny_tarball()
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> PackageRegistries:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, 0, ssl_context=self._tls).start()
        self.url = f"https://{self.host}:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.paths.append(path)
        wheel_name, wheel = self._wheel
        tarball_path = f"/npm/{NPM_PACKAGE}/-/{NPM_PACKAGE}-1.0.0.tgz"
        if path in ("/simple/", f"/simple/{PYPI_PACKAGE}/"):
            digest = hashlib.sha256(wheel).hexdigest()
            link = f'<a href="/files/{wheel_name}#sha256={digest}">{wheel_name}</a>'
            if path == "/simple/":
                link = f'<a href="/simple/{PYPI_PACKAGE}/">{PYPI_PACKAGE}</a>'
            return web.Response(text=f"<!DOCTYPE html><html><body>{link}</body></html>", content_type="text/html")
        if path == f"/files/{wheel_name}":
            return web.Response(body=wheel, content_type="application/octet-stream")
        if path == f"/npm/{NPM_PACKAGE}":
            integrity = "sha512-" + base64.b64encode(hashlib.sha512(self._tarball).digest()).decode()
            dist = {"tarball": self.url + tarball_path, "shasum": hashlib.sha1(self._tarball).hexdigest()}  # noqa: S324 - npm's own field
            version = {"name": NPM_PACKAGE, "version": "1.0.0", "dist": {**dist, "integrity": integrity}}
            document = {"name": NPM_PACKAGE, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version}}
            return web.json_response(document)
        if path == tarball_path:
            return web.Response(body=self._tarball, content_type="application/octet-stream")
        return web.Response(status=404, text="not found")
