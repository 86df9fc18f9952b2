"""A small Debian archive and npm registry, made in code and served over HTTP on the loopback address."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import lzma
import tarfile
import threading
from contextlib import contextmanager
from pathlib import Path

SUITE = "testsuite"
PACKAGES = [  # (name, section, synopsis, long description lines, source)
    ("netcat-x", "net", "TCP/IP swiss army knife", ["reads and writes data across network connections"], "netcat"),
    ("gnuplot-x", "math", "plotting program", ["draws curves", "and surfaces"], "gnuplot"),
    ("mutt-x", "mail", "text-based mail reader", ["handles MIME", "and PGP"], "mutt"),
    ("zsh-x", "shells", "shell with lots of features", ["an interactive login shell"], "zsh"),
    ("short-x", "net", "a synopsis only", [], "short"),
]


def _tar(files: dict[str, bytes], mode: str = "w:xz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("./usr/share/doc/docpkg/html/_sources/link.txt")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"  # a link is never followed
        tar.addfile(link)
    return buf.getvalue()


def make_deb(files: dict[str, bytes]) -> bytes:
    """A .deb: an ar archive of debian-binary, control.tar.xz and data.tar.xz."""
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", _tar({"./control": b"Package: docpkg\n"})),
               ("data.tar.xz", _tar(files))]
    out = b"!<arch>\n"
    for name, data in members:
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data
        out += b"\n" if len(data) % 2 else b""
    return out


def build_archive(root: Path, *, date: str = "Sat, 11 Jul 2026 10:16:37 UTC") -> dict[str, bytes]:
    """Write dists/<SUITE>/... and pool/... under ``root``; returns the files by archive path."""
    deb = make_deb({
        "./usr/share/doc/docpkg/html/_sources/index.txt": b"Welcome\n=======\n\nThe manual.\n",
        "./usr/share/doc/docpkg/html/_sources/latin1.txt": "caf\xe9".encode("latin-1"),
        "./usr/share/doc/docpkg/html/index.html": b"<html></html>",
        "./usr/share/doc/docpkg/copyright": b"Files: *\nLicense: GPL-2+\n",
    })
    pool = "pool/main/d/docpkg/docpkg_1.0_all.deb"
    packages, translations = [], []
    for name, section, synopsis, lines, source in PACKAGES:
        body = "\n".join(f" {ln}" for ln in lines)
        md5 = hashlib.md5(f"{synopsis}\n{body}\n".encode()).hexdigest()
        packages.append(f"Package: {name}\nSource: {source} (1.0)\nVersion: 1.0\nSection: {section}\n"
                        f"Installed-Size: 100\nDescription: {synopsis}\nDescription-md5: {md5}\n")
        translations.append(f"Package: {name}\nDescription-md5: {md5}\nDescription-en: {synopsis}\n{body}\n"
                            if lines else f"Package: {name}\nDescription-md5: {md5}\nDescription-en: {synopsis}\n")
    packages.append("Package: docs-meta\nVersion: 2\nSection: doc\nInstalled-Size: 10\nDepends: docpkg\n"
                    "Description: metapackage\n")
    packages.append(f"Package: docpkg\nVersion: 1.0\nSection: doc\nInstalled-Size: 900\nFilename: {pool}\n"
                    f"SHA256: {hashlib.sha256(deb).hexdigest()}\nDescription: the docs\n")
    indices = {"main/binary-amd64/Packages.xz": lzma.compress("\n".join(packages).encode()),
               "main/i18n/Translation-en.xz": lzma.compress("\n".join(translations).encode())}
    lines = [f" {hashlib.sha256(d).hexdigest()} {len(d)} {p}" for p, d in sorted(indices.items())]
    release = (f"Origin: Test\nSuite: {SUITE}\nCodename: {SUITE}\nVersion: 1.0\nDate: {date}\n"
               "Acquire-By-Hash: yes\nSHA256:\n" + "\n".join(lines) + "\n").encode()
    files = {f"dists/{SUITE}/Release": release, pool: deb}
    for path, data in indices.items():
        folder = path.rsplit("/", 1)[0]
        files[f"dists/{SUITE}/{folder}/by-hash/SHA256/{hashlib.sha256(data).hexdigest()}"] = data
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return files


def npm_package(root: Path, name: str, version: str, files: dict[str, bytes]) -> str:
    """Publish ``name@version`` (a gzip tarball of package/<file>) in a registry laid out under ``root``; returns
    its integrity."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for fname, data in files.items():
            info = tarfile.TarInfo(f"package/{fname}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tgz = buf.getvalue()
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()
    tarball = f"{name}/-/{name.split('/')[-1]}-{version}.tgz"
    (root / tarball).parent.mkdir(parents=True, exist_ok=True)
    (root / tarball).write_bytes(tgz)
    meta = root / name.replace("/", "%2f") / version
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"name": name, "version": version,
                                "dist": {"tarball": f"BASE/{tarball}", "integrity": integrity}}))
    return integrity


@contextmanager
def serve(root: Path):
    """An HTTP server for ``root`` on 127.0.0.1 (a random port); yields its base URL."""
    base: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def translate_path(self, path):  # no unquoting: %2f (a scoped npm name) stays part of a file name
            return str(root / path.split("?", 1)[0].lstrip("/"))

        def do_GET(self):  # registry metadata names tarballs by absolute URL
            path = Path(self.translate_path(self.path))
            if path.is_file() and path.read_bytes().startswith(b'{"name"'):
                body = path.read_bytes().replace(b"BASE", base[0].rstrip("/").encode())
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base.append(f"http://127.0.0.1:{server.server_address[1]}/")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield base[0]
    finally:
        server.shutdown()
        server.server_close()
