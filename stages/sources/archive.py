"""Package archives over plain HTTP, in Python (no apt, dpkg or npm binary): a Debian suite (Release, its indices by
SHA-256, .deb members) and npm tarballs (by the registry's integrity hash). Downloads land in a content-addressed
cache after their hash is checked, so a run whose pins are cached needs no network."""

from __future__ import annotations

import base64
import bz2
import configparser
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from stages.common.atomic import write_bytes_atomic
from stages.common.redact import redact_url
from stages.sources.base import SourceError, offline

TIMEOUT_S = 60
MIRROR_ENV = "LMPIPE_DEBIAN_MIRROR"
_COMPRESSIONS = ((".xz", lzma.decompress), (".gz", gzip.decompress), (".bz2", bz2.decompress), ("", bytes))


def http_get(url: str, what: str) -> bytes:
    """The body at ``url``; any failure is one SourceError line naming ``what`` and the (redacted) URL."""
    if offline():
        raise SourceError(f"{what}: {redact_url(url)} is not cached and LMPIPE_OFFLINE is set")
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
            return resp.read()
    except urllib.error.HTTPError as exc:
        raise SourceError(f"{what}: {redact_url(url)} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        raise SourceError(f"{what}: cannot fetch {redact_url(url)} ({why})") from None


class Store:
    """Bytes kept by their SHA-256 under one folder; writes are atomic and checked."""

    def __init__(self, root: Path) -> None:
        self.root = root / "by-hash"

    def path(self, sha256: str) -> Path:
        return self.root / sha256

    def get(self, sha256: str) -> bytes | None:
        p = self.path(sha256)
        data = p.read_bytes() if p.is_file() else None
        if data is not None and hashlib.sha256(data).hexdigest() != sha256:  # a damaged entry: drop it, fetch again
            p.unlink()
            return None
        return data

    def put(self, data: bytes) -> None:
        write_bytes_atomic(self.path(hashlib.sha256(data).hexdigest()), data)


def fetch_verified(store: Store, url: str, sha256: str, what: str) -> bytes:
    """The bytes with this SHA-256: from the cache, else from ``url``, refused when they hash otherwise."""
    data = store.get(sha256)
    if data is None:
        data = http_get(url, what)
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            raise SourceError(f"{what}: {redact_url(url)} has SHA-256 {got[:16]}..., the index names "
                              f"{sha256[:16]}... (truncated or tampered download)")
        store.put(data)
    return data


# --- Debian ------------------------------------------------------------------------------------------------

def parse_stanzas(lines) -> Iterator[dict[str, str]]:
    """Parse deb822 stanzas (Release, Packages, Translation-en); continuation lines are kept."""
    current: dict[str, str] = {}
    key = None
    for raw in lines:
        line = raw.rstrip("\n")
        if not line.strip():
            if current:
                yield current
            current, key = {}, None
        elif line[0] in " \t" and key is not None:
            current[key] += "\n" + line
        else:
            key, _, value = line.partition(":")
            current[key] = value.strip()
    if current:
        yield current


def host_mirror(suite: str, sources_dir: Path = Path("/etc/apt")) -> str | None:
    """The first Debian mirror this machine's apt configuration lists for ``suite`` (or for any suite), if any."""
    found: list[tuple[str, list[str]]] = []
    for f in sorted(sources_dir.glob("sources.list.d/*.sources")):
        for st in parse_stanzas(f.read_text(errors="replace").splitlines()):
            if "deb" in st.get("Types", "").split() and st.get("Enabled", "yes").lower() != "no":
                found += [(uri, st.get("Suites", "").split()) for uri in st.get("URIs", "").split()]
    for f in [sources_dir / "sources.list", *sorted(sources_dir.glob("sources.list.d/*.list"))]:
        for line in f.read_text(errors="replace").splitlines() if f.is_file() else []:
            words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                found.append((words[1], [words[2]]))
    return next((uri for uri, suites in found if suite in suites), found[0][0] if found else None)


def version_key(version: str) -> tuple:
    """A sort key that orders Debian version strings as dpkg does (epoch, upstream, revision)."""
    epoch, _, rest = version.rpartition(":") if ":" in version else ("0", "", version)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")

    def part(s: str) -> tuple:  # alternating non-digit runs (dpkg's char weights) and numbers, then an end mark
        out: list = []
        for alpha, digits in re.findall(r"([^0-9]*)([0-9]*)", s)[:-1]:  # the last match is the empty one at the end
            out += [tuple(-1 if c == "~" else ord(c) if c.isalpha() else ord(c) + 256 for c in alpha) + (0,),
                    int(digits or 0)]
        return (*out, (0,))  # "~" sorts before the end, the end before anything else

    return int(epoch or 0), part(upstream), part(revision)


@dataclass
class Release:
    """A suite's Release file: its fields, its SHA-256 and the SHA-256 and size of every index it names."""

    fields: dict[str, str]
    sha256: str
    indices: dict[str, tuple[str, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: bytes) -> Release:
        text = data.decode("utf-8", errors="replace")
        stanza = next(parse_stanzas(text.splitlines()), {})
        rows = [line.split() for line in stanza.get("SHA256", "").splitlines()]
        indices = {row[2]: (row[0], int(row[1])) for row in rows if len(row) == 3}
        return cls({k: v for k, v in stanza.items() if "\n" not in v}, hashlib.sha256(data).hexdigest(), indices)

    def identity(self) -> dict[str, str]:
        keys = ("Origin", "Suite", "Codename", "Version", "Date")
        return {k.lower(): self.fields[k] for k in keys if k in self.fields} | {"release_sha256": self.sha256}


class DebianArchive:
    """One suite of a Debian archive at ``mirror``, read over HTTP with every index checked against Release."""

    def __init__(self, mirror: str, suite: str, cache: Path, *, keyring: str | None = None) -> None:
        self.mirror = mirror.rstrip("/") + "/"
        self.suite = suite
        self.store = Store(cache)
        self.keyring = keyring
        self.signature = "not checked"

    def url(self, path: str) -> str:
        return urllib.parse.urljoin(self.mirror, path)

    def release(self, pinned: str | None = None) -> Release:
        """The suite's Release: the pinned one from the cache, else fetched and its signature checked (by gpgv)."""
        data = self.store.get(pinned) if pinned else None
        if data is not None:
            self.signature = "checked when it was fetched (the pinned Release is read from the cache)"
        else:
            data = http_get(self.url(f"dists/{self.suite}/Release"), f"Debian suite {self.suite}")
            self._check_signature(data)
            self.store.put(data)
        release = Release.parse(data)
        if release.fields.get("Suite") != self.suite and release.fields.get("Codename") != self.suite:
            raise SourceError(f"Debian suite {self.suite}: {redact_url(self.url('dists/' + self.suite + '/Release'))} "
                              "is not a Release file of that suite")
        return release

    def _check_signature(self, data: bytes) -> None:
        keyring = self.keyring
        if not keyring or not Path(keyring).is_file() or shutil.which("gpgv") is None:
            self.signature = "not checked (no keyring or gpgv on this machine); the pinned SHA-256 holds"
            return
        sig = http_get(self.url(f"dists/{self.suite}/Release.gpg"), f"Debian suite {self.suite} signature")
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "Release").write_bytes(data)
            (Path(tmp) / "Release.gpg").write_bytes(sig)
            proc = subprocess.run(["gpgv", "--keyring", keyring, "Release.gpg", "Release"], cwd=tmp,
                                  capture_output=True, text=True)
        if proc.returncode != 0:
            raise SourceError(f"Debian suite {self.suite}: Release signature does not verify with {keyring}")
        self.signature = f"verified with {Path(keyring).name}"

    def index(self, release: Release, name: str) -> tuple[str, bytes]:
        """(path, decompressed bytes) of index ``name`` in the first compression Release lists, by hash if served so."""
        for ext, decompress in _COMPRESSIONS:
            path = name + ext
            if path in release.indices:
                sha, _ = release.indices[path]
                by_hash = release.fields.get("Acquire-By-Hash", "").lower() == "yes"
                where = f"{path.rsplit('/', 1)[0]}/by-hash/SHA256/{sha}" if by_hash and "/" in path else path
                data = fetch_verified(self.store, self.url(f"dists/{self.suite}/{where}"), sha,
                                      f"Debian suite {self.suite} {path}")
                return path, decompress(data)
        raise SourceError(f"Debian suite {self.suite}: its Release lists no {name} index")

    def package(self, filename: str, sha256: str) -> bytes:
        return fetch_verified(self.store, self.url(filename), sha256, f"Debian package {Path(filename).name}")


def deb_files(deb: bytes, what: str) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of every regular file in a .deb's data archive, in path order; links are not followed."""
    if not deb.startswith(b"!<arch>\n"):
        raise SourceError(f"{what}: not a Debian package (no ar header)")
    pos, data = 8, None
    while pos + 60 <= len(deb):
        name = deb[pos:pos + 16].decode().strip().rstrip("/")
        size = int(deb[pos + 48:pos + 58].decode().strip())
        body = deb[pos + 60:pos + 60 + size]
        pos += 60 + size + (size % 2)
        if name.startswith("data.tar"):
            data = (name, body)
    if data is None:
        raise SourceError(f"{what}: no data.tar member")
    name, body = data
    if name.endswith(".zst"):
        import zstandard  # only Ubuntu-style packages need it

        body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
    mode = {".xz": "r:xz", ".gz": "r:gz", ".bz2": "r:bz2"}.get(Path(name).suffix, "r:")
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode=mode) as tar:
            members = {m.name.lstrip("./"): m for m in tar.getmembers() if m.isfile() or m.islnk()}
            for path in sorted(members):
                yield path, tar.extractfile(members[path]).read()  # type: ignore[union-attr]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise SourceError(f"{what}: damaged data archive ({exc})") from None


# --- npm ----------------------------------------------------------------------------------------------------

def npm_registry() -> str | None:
    """The npm registry this machine names: ``npm_config_registry``, an npmrc's ``registry=``, else npm's own."""
    if env := os.environ.get("npm_config_registry") or os.environ.get("NPM_CONFIG_REGISTRY"):
        return env
    for rc in (Path.home() / ".npmrc", Path("/etc/npmrc"), Path("/usr/etc/npmrc"), Path("/usr/local/etc/npmrc")):
        if rc.is_file():
            parser = configparser.ConfigParser(interpolation=None)
            try:
                parser.read_string("[npmrc]\n" + rc.read_text(errors="replace"))
            except configparser.Error:
                continue
            if parser.get("npmrc", "registry", fallback=None):
                return parser.get("npmrc", "registry")
    if shutil.which("npm"):
        proc = subprocess.run(["npm", "config", "get", "registry"], capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip().startswith("http"):
            return proc.stdout.strip()
    return None


def split_spec(spec: str) -> tuple[str, str]:
    """``@scope/name@1.2.3`` -> (``@scope/name``, ``1.2.3``); the version must be exact (pinned)."""
    name, sep, version = spec.rpartition("@")
    if not sep or not name or not re.fullmatch(r"\d+\.\d+\.\d+[0-9A-Za-z.+-]*", version):
        raise SourceError(f"npm package {spec}: give an exact version (name@1.2.3) so runs are reproducible")
    return name, version


def integrity_ok(data: bytes, integrity: str) -> bool:
    """Check an npm ``integrity`` string (Subresource Integrity: ``sha512-<base64>``, several allowed)."""
    for item in integrity.split():
        algo, _, b64 = item.partition("-")
        if algo in ("sha512", "sha384", "sha256", "sha1"):
            return base64.b64encode(hashlib.new(algo, data).digest()).decode() == b64
    return False


def npm_tarball(registry: str, spec: str, pinned: str | None) -> tuple[dict[str, str], bytes]:
    """(identity, tarball bytes) of an exact ``name@version``, refused unless it matches its integrity and the pin."""
    if spec.startswith(("http://", "https://")):  # a tarball URL (a private registry's): its own hash is the pin
        data = http_get(spec, f"npm package {redact_url(spec)}")
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
        if pinned and integrity != pinned:
            raise PinMismatch(f"npm package {redact_url(spec)}", pinned, integrity)
        stem = Path(urllib.parse.urlparse(spec).path).name.removesuffix(".tgz")
        name, _, version = stem.rpartition("-")
        return {"name": name or stem, "version": version, "integrity": integrity}, data
    name, version = split_spec(spec)
    base = registry.rstrip("/") + "/"
    meta_url = urllib.parse.urljoin(base, f"{name.replace('/', '%2f')}/{version}")
    try:
        meta = json.loads(http_get(meta_url, f"npm package {spec}"))
        tarball_url, integrity = meta["dist"]["tarball"], meta["dist"]["integrity"]
    except (ValueError, KeyError, TypeError):
        raise SourceError(f"npm package {spec}: {redact_url(meta_url)} is not npm package metadata") from None
    if pinned and integrity != pinned:
        raise PinMismatch(f"npm package {spec}", pinned, integrity)
    data = http_get(tarball_url, f"npm package {spec}")
    if not integrity_ok(data, integrity):
        raise SourceError(f"npm package {spec}: {redact_url(tarball_url)} does not match its integrity "
                          f"{integrity[:24]}... (truncated or tampered download)")
    return {"name": name, "version": version, "integrity": integrity}, data


class PinMismatch(SourceError):
    """The upstream no longer serves what the pin names."""

    def __init__(self, what: str, pinned: str, offered: str) -> None:
        super().__init__(f"{what}: pinned {pinned}, the upstream offers {offered}")
