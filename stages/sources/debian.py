"""Corpora from Debian's archive, fetched with apt without touching the system's apt state.

apt uses private lists and cache under ``<cache_dir>/apt``: nothing is installed, ``/var/lib/apt`` is never
written. Package names are resolved through apt-cache (``linux-doc`` -> ``linux-doc-6.1``).

- :func:`read_debian_docs`: documentation pages (reST sources of the Sphinx HTML) from doc packages.
- :func:`read_debian_descriptions`: package long descriptions labeled by archive Section, joined from the
  Packages index (``apt-cache dumpavail``) and ``Translation-en`` on ``Description-md5``.
"""

from __future__ import annotations

import fnmatch
import getpass
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stages.common.documents import Record
from stages.config import check
from stages.sources.base import Provenance, SourceContext, SourceError, offline, sha256_file

TOPICAL_SECTIONS = (
    "net", "science", "admin", "games", "text", "sound", "graphics", "fonts", "web", "math", "mail",
    "editors", "database", "video", "electronics", "hamradio",
)
DEBIAN_LICENCE = ("each package's own licence, see /usr/share/doc/<package>/copyright inside it; "
                  "Debian's archive metadata is freely redistributable")


@dataclass(frozen=True, kw_only=True)
class DebianDocsSource:
    """Documentation pages from Debian doc packages, fetched with apt into a private cache."""

    kind: Literal["debian_docs"]
    """`debian_docs` selects this source."""
    packages: tuple[str, ...] = ("linux-doc", "python3-doc")
    """Debian packages to read; a metapackage (`linux-doc`) is followed to the versioned package it depends on."""
    include: tuple[str, ...] = ("usr/share/doc/*/html/_sources/*.txt",)
    """Glob patterns (relative to the package root) of the files read; the default: the reST sources beside Sphinx
    HTML."""
    refresh_lists: bool = False
    """Run `apt-get update` on the private apt lists even when cached ones exist."""


@dataclass(frozen=True, kw_only=True)
class DebianDescriptionsSource:
    """Debian package descriptions (synopsis + long description) labeled by their archive Section."""

    kind: Literal["debian_descriptions"]
    """`debian_descriptions` selects this source."""
    sections: tuple[str, ...] = TOPICAL_SECTIONS
    """Archive sections kept (the labels); packages of other sections are left out; [] = every section."""
    exclude_sections: tuple[str, ...] = ()
    """Archive sections left out (e.g. the task's, for an in-domain DAPT corpus); must not overlap `sections`."""
    unwrap: bool = False
    """Join each paragraph's lines into one line (the archive wraps at about 75 columns; C4's rules work per line)."""
    refresh_lists: bool = False
    """Run `apt-get update` on the private apt lists even when cached ones exist."""

    def __post_init__(self) -> None:
        overlap = sorted(set(self.sections) & set(self.exclude_sections))
        check(not overlap, f"exclude_sections: {overlap[0]!r} is also in sections" if overlap else "")


class Apt:
    """apt-get / apt-cache bound to a private state folder."""

    def __init__(self, root: Path) -> None:
        if shutil.which("apt-get") is None or shutil.which("apt-cache") is None:
            raise SourceError("apt-get/apt-cache not found: the Debian sources need a Debian-based machine; "
                              "point ingest at files or a hub dataset instead")
        root = root.resolve()  # apt resolves relative Dir:: options against its own defaults
        self.root = root
        self.lists = root / "lists"
        (self.lists / "partial").mkdir(parents=True, exist_ok=True)
        (root / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        self.options = [
            "-o", f"Dir::State::Lists={self.lists}",
            "-o", f"Dir::Cache={root / 'cache'}",
            "-o", "Acquire::Languages=en",  # fetch Translation-en, where the long descriptions live
            "-o", "Debug::NoLocking=1",  # private folders: the system's apt locks are not ours to take
            "-o", f"APT::Sandbox::User={getpass.getuser()}",  # write to our folders as ourselves
        ]

    def run(self, tool: str, *args: str, cwd: Path | None = None) -> str:
        proc = subprocess.run([tool, *self.options, *args], capture_output=True, text=True, cwd=cwd,
                              errors="replace")
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(("E:", "Err"))] or \
                proc.stderr.strip().splitlines() or ["no message"]
            raise SourceError(f"{tool} {' '.join(args)} failed: {lines[-1].strip()}")
        return proc.stdout

    def has_lists(self) -> bool:
        return any(self.lists.glob("*_Packages*")) and any(self.lists.glob("*Translation-en*"))

    def ensure_lists(self, refresh: bool, prov: Provenance) -> None:
        """Fetch the archive indexes into the private lists once; later runs reuse them offline."""
        if refresh or not self.has_lists():
            if offline():
                raise SourceError(f"apt lists not cached in {self.lists} and LMPIPE_OFFLINE is set")
            out = self.run("apt-get", "update")
            if "Err:" in out:  # apt-get update exits 0 on some fetch errors; treat them as failures
                raise SourceError(f"apt-get update: {[ln for ln in out.splitlines() if 'Err:' in ln][0].strip()}")
            if not self.has_lists():
                raise SourceError("apt-get update fetched no Packages/Translation-en indexes "
                                  "(registry unreachable or no sources configured)")
        for f in sorted(self.lists.iterdir()):
            if f.is_file() and (f.name.endswith("InRelease") or "_Packages" in f.name or "Translation-en" in f.name):
                info = {}
                if f.name.endswith("InRelease"):
                    info = _release_info(f)
                prov.add_file(f, role="apt-index", **info)

    def show(self, package: str) -> dict[str, str]:
        """The candidate version's stanza of ``package``."""
        text = self.run("apt-cache", "show", "--no-all-versions", package)
        stanzas = list(parse_stanzas(text.splitlines()))
        if not stanzas:
            raise SourceError(f"apt package {package}: not found in the archive indexes")
        return stanzas[0]

    def resolve(self, package: str) -> dict[str, str]:
        """Follow metapackages (small packages with exactly one dependency) to the real package."""
        seen = [package]
        stanza = self.show(package)
        while True:
            deps = [d.strip().split()[0] for d in stanza.get("Depends", "").split(",") if d.strip()]
            size = int(stanza.get("Installed-Size", "0") or 0)
            if len(deps) != 1 or size > 64 or deps[0] in seen:
                return stanza
            seen.append(deps[0])
            stanza = self.show(deps[0])

    def download(self, stanza: dict[str, str], dest: Path) -> Path:
        """``apt-get download`` the candidate version into ``dest`` unless a verified copy is there."""
        expected = stanza.get("SHA256")
        name = Path(stanza["Filename"]).name
        deb = dest / name
        if deb.is_file() and (expected is None or sha256_file(deb) == expected):
            return deb
        if offline():
            raise SourceError(f"apt package {stanza['Package']}: {deb} not cached and LMPIPE_OFFLINE is set")
        self.run("apt-get", "download", f"{stanza['Package']}={stanza['Version']}", cwd=dest)
        if not deb.is_file():
            found = sorted(dest.glob(f"{stanza['Package']}_*.deb"))
            if not found:
                raise SourceError(f"apt-get download {stanza['Package']}: no .deb appeared in {dest}")
            deb = found[-1]
        if expected and sha256_file(deb) != expected:
            raise SourceError(f"{deb}: SHA256 does not match the archive index; delete it and run again")
        return deb


def parse_stanzas(lines) -> Iterator[dict[str, str]]:
    """Parse deb822 stanzas (Packages, Translation-en, apt-cache output); continuation lines are kept."""
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


def _release_info(path: Path) -> dict[str, str]:
    info = {}
    for line in path.read_text(errors="replace").splitlines():
        for field in ("Origin", "Suite", "Codename", "Date", "Version"):
            if line.startswith(field + ":"):
                info[field.lower()] = line.split(":", 1)[1].strip()
        if line.startswith(("MD5Sum:", "SHA256:")):
            break
    return info


def _extract(deb: Path, dest: Path) -> Path:
    """``dpkg-deb -x`` once into a folder named after the .deb; a stamp marks a finished extraction."""
    target = dest / deb.stem
    stamp = target / ".extracted"
    if stamp.exists():
        return target
    if shutil.which("dpkg-deb") is None:
        raise SourceError("dpkg-deb not found: it unpacks the Debian documentation packages")
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    proc = subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        raise SourceError(f"{deb}: dpkg-deb -x failed: {proc.stderr.strip().splitlines()[-1:]}")
    stamp.write_text("ok\n")
    return target


def read_debian_docs(cfg: DebianDocsSource, ctx: SourceContext, prov: Provenance) -> Iterator[Record]:
    apt = Apt(ctx.subdir("apt"))
    apt.ensure_lists(cfg.refresh_lists, prov)
    prov.description = f"Debian documentation packages {', '.join(cfg.packages)}"
    prov.licence = DEBIAN_LICENCE
    debs = ctx.subdir("debs")
    for requested in cfg.packages:
        stanza = apt.resolve(requested)
        deb = apt.download(stanza, debs)
        root = _extract(deb, ctx.subdir("extracted"))
        prov.packages.append({"registry": "debian", "requested": requested, "name": stanza["Package"],
                              "version": stanza["Version"], "section": stanza.get("Section"),
                              "sha256": stanza.get("SHA256")})
        prov.add_file(deb, role="download", package=stanza["Package"])
        _record_copyright(root, stanza["Package"], prov)
        files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        for path in files:
            rel = path.relative_to(root).as_posix()
            if not any(fnmatch.fnmatch(rel, pat) for pat in cfg.include):
                continue
            data = path.read_bytes()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                prov.skip("invalid_utf8")
                continue
            yield Record(text=text, source=stanza["Package"], url=None,
                         meta={"package": stanza["Package"], "version": stanza["Version"], "path": "/" + rel})


def _record_copyright(root: Path, package: str, prov: Provenance) -> None:
    """Put the package's own licence statement (debian/copyright) into the manifest for auditors."""
    path = root / "usr" / "share" / "doc" / package / "copyright"
    if not path.is_file():
        return
    names = sorted({line.split(":", 1)[1].strip() for line in path.read_text(errors="replace").splitlines()
                    if line.startswith("License:") and 0 < len(line.split(":", 1)[1].strip()) <= 40})
    prov.add_file(path, role="licence", package=package, licences=names)


def long_description(desc: str) -> tuple[str, str]:
    """Split a Description-en field into (synopsis, body) following Debian Policy 5.6.13: the body's lines
    start with one space, a line of a single ``.`` is a paragraph break."""
    synopsis, _, rest = desc.partition("\n")
    body = []
    for line in rest.splitlines():
        line = line[1:] if line.startswith(" ") else line
        body.append("" if line.strip() == "." else line.rstrip())
    return synopsis.strip(), "\n".join(body).strip()


_BULLET = ("* ", "- ", "+ ", "o ", "#")


def unwrap(body: str) -> str:
    """Join each paragraph's wrapped lines into one; a blank-line follower, an indented line (Debian Policy
    5.6.13: verbatim) or a list item starts a new line."""
    out: list[str] = []
    for line in body.split("\n"):
        joins = bool(out and out[-1] and line and not line[0].isspace() and not line.startswith(_BULLET))
        if joins:
            out[-1] = f"{out[-1]} {line.strip()}"
        else:
            out.append(line.rstrip())
    return "\n".join(out)


def read_debian_descriptions(cfg: DebianDescriptionsSource, ctx: SourceContext,
                             prov: Provenance) -> Iterator[Record]:
    apt = Apt(ctx.subdir("apt"))
    apt.ensure_lists(cfg.refresh_lists, prov)
    prov.description = ("Debian package descriptions (Packages + Translation-en), labeled by Section"
                        + (f"; sections {', '.join(cfg.sections)}" if cfg.sections else "; every section")
                        + (f" except {', '.join(cfg.exclude_sections)}" if cfg.exclude_sections else ""))
    prov.licence = DEBIAN_LICENCE
    translations: dict[str, str] = {}
    helper = shutil.which("apt-helper") or "/usr/lib/apt/apt-helper"
    for f in sorted(apt.lists.glob("*Translation-en*")):
        proc = subprocess.run([helper, "cat-file", str(f)], capture_output=True, text=True, errors="replace")
        if proc.returncode != 0:
            raise SourceError(f"{f}: cannot decompress ({proc.stderr.strip()[:200]})")
        for st in parse_stanzas(proc.stdout.splitlines()):
            if "Description-md5" in st and "Description-en" in st:
                translations[st["Description-md5"]] = st["Description-en"]
    wanted, unwanted = set(cfg.sections), set(cfg.exclude_sections)
    rows = []
    for st in parse_stanzas(apt.run("apt-cache", "dumpavail").splitlines()):
        section = st.get("Section", "").split("/")[-1]  # contrib/net and non-free/net are still "net"
        if (wanted and section not in wanted) or section in unwanted or not section:
            continue
        desc = st.get("Description-en") or translations.get(st.get("Description-md5", ""))
        if desc is None:
            prov.skip("no_translation")
            continue
        synopsis, body = long_description(desc)
        if not body:
            prov.skip("no_long_description")
            continue
        if cfg.unwrap:
            body = unwrap(body)
        source = re.split(r"\s", st.get("Source", st["Package"]).strip())[0]
        rows.append(Record(text=f"{synopsis}\n{body}", source="debian-descriptions", url=None, label=section,
                           group=source, meta={"package": st["Package"], "version": st.get("Version"),
                                               "source_package": source, "section": section}))
    prov.extra["translations"] = len(translations)
    yield from sorted(rows, key=lambda r: r.meta["package"])
