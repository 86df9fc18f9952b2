"""Corpora from a Debian archive read over HTTP (:mod:`stages.sources.archive`; no apt or dpkg): doc packages' pages
and package descriptions labeled by Section. Every index is checked against the Release, the Release against the pin.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from stages.common.documents import Record
from stages.config import check
from stages.sources.archive import (MIRROR_ENV, DebianArchive, PinMismatch, deb_files, host_mirror,
                                    parse_stanzas, version_key)
from stages.sources.base import Provenance, SourceContext, SourceError
from stages.sources.pins import describe

TOPICAL_SECTIONS = (
    "net", "science", "admin", "games", "text", "sound", "graphics", "fonts", "web", "math", "mail",
    "editors", "database", "video", "electronics", "hamradio",
)
DEBIAN_LICENCE = ("each package's own licence, see /usr/share/doc/<package>/copyright inside it; "
                  "Debian's archive metadata is freely redistributable")


@dataclass(frozen=True, kw_only=True)
class DebianSuite:
    """The archive suite a Debian source reads (keys shared by both Debian sources)."""

    kind: str
    mirror: str | None = None
    """Debian mirror URL (or a dated snapshot of the archive); null = `LMPIPE_DEBIAN_MIRROR`, else the first mirror
    in this machine's apt sources."""
    suite: str = "bookworm"
    """Suite (codename) read; a stable release's base suite changes only at point releases."""
    components: tuple[str, ...] = ("main",)
    """Archive components read."""
    architecture: str = "amd64"
    """Architecture of the Packages index read (the same on every host, so the corpus is too)."""
    keyring: str | None = "/usr/share/keyrings/debian-archive-keyring.gpg"
    """OpenPGP keyring the Release signature is checked with (by gpgv) where both exist; the pin's SHA-256 holds
    either way."""


@dataclass(frozen=True, kw_only=True)
class DebianDocsSource(DebianSuite):
    """Documentation pages from Debian doc packages, read from the .deb files without installing them."""

    kind: Literal["debian_docs"]
    """`debian_docs` selects this source."""
    packages: tuple[str, ...] = ("linux-doc", "python3-doc")
    """Debian packages to read; a metapackage (`linux-doc`) is followed to the versioned package it depends on."""
    include: tuple[str, ...] = ("usr/share/doc/*/html/_sources/*.txt",)
    """Glob patterns (relative to the package root) of the files read; the default: the reST sources beside Sphinx
    HTML."""


@dataclass(frozen=True, kw_only=True)
class DebianDescriptionsSource(DebianSuite):
    """Debian package descriptions (synopsis + long description) labeled by their archive Section."""

    kind: Literal["debian_descriptions"]
    """`debian_descriptions` selects this source."""
    sections: tuple[str, ...] = TOPICAL_SECTIONS
    """Archive sections kept (the labels); packages of other sections are left out; [] = every section."""
    exclude_sections: tuple[str, ...] = ()
    """Archive sections left out (e.g. the task's, for an in-domain DAPT corpus); must not overlap `sections`."""
    unwrap: bool = False
    """Join each paragraph's lines into one line (the archive wraps at about 75 columns; C4's rules work per line)."""

    def __post_init__(self) -> None:
        overlap = sorted(set(self.sections) & set(self.exclude_sections))
        check(not overlap, f"exclude_sections: {overlap[0]!r} is also in sections" if overlap else "")


def open_suite(cfg: DebianSuite, ctx: SourceContext, prov: Provenance,
               names: list[str]) -> tuple[DebianArchive, dict[str, bytes]]:
    """The suite at the configured mirror (else ``LMPIPE_DEBIAN_MIRROR``, else the first in this machine's apt sources)
    and its indices ``names`` (decompressed), its Release checked against the pin and recorded as the new one."""
    mirror = cfg.mirror or os.environ.get(MIRROR_ENV) or host_mirror(cfg.suite)
    if not mirror:
        raise SourceError(f"{cfg.kind}: no Debian mirror is configured: set the source's mirror (or {MIRROR_ENV}) "
                          "to a Debian mirror's URL")
    archive = DebianArchive(mirror, cfg.suite, ctx.subdir("debian"), keyring=cfg.keyring)
    pinned = (ctx.pin or {}).get("release_sha256")
    release = archive.release(pinned)
    if pinned and release.sha256 != pinned:
        raise PinMismatch(f"{cfg.kind} suite {cfg.suite}", describe(ctx.pin),
                          describe({"kind": cfg.kind, **release.identity()}))
    print(f"[ingest] {cfg.kind} suite {cfg.suite}: Release signature {archive.signature}", file=sys.stderr)
    out, used = {}, {}
    for name in names:
        path, out[name] = archive.index(release, name)
        used[path] = release.indices[path][0]
    prov.extra["pin"] = {"kind": prov.kind, **release.identity(), "indices": used}
    return archive, out


def packages_by_name(data: bytes) -> dict[str, dict[str, str]]:
    """The newest stanza of each package in a Packages index."""
    best: dict[str, dict[str, str]] = {}
    for st in parse_stanzas(data.decode("utf-8", errors="replace").splitlines()):
        name = st.get("Package")
        if name and (name not in best or version_key(st.get("Version", "0")) > version_key(best[name]["Version"])):
            best[name] = st
    return best


def resolve(packages: dict[str, dict[str, str]], package: str) -> dict[str, str]:
    """Follow metapackages (small packages with exactly one dependency) to the real package."""
    if package not in packages:
        raise SourceError(f"Debian package {package}: not in the archive's Packages index")
    seen = [package]
    stanza = packages[package]
    while True:
        deps = [d.strip().split()[0] for d in stanza.get("Depends", "").split(",") if d.strip()]
        size = int(stanza.get("Installed-Size", "0") or 0)
        if len(deps) != 1 or size > 64 or deps[0] in seen or deps[0] not in packages:
            return stanza
        seen.append(deps[0])
        stanza = packages[deps[0]]


def read_debian_docs(cfg: DebianDocsSource, ctx: SourceContext, prov: Provenance) -> Iterator[Record]:
    archive, indices = open_suite(cfg, ctx, prov, [f"{c}/binary-{cfg.architecture}/Packages" for c in cfg.components])
    packages = {name: st for data in indices.values() for name, st in packages_by_name(data).items()}
    prov.description = f"Debian documentation packages {', '.join(cfg.packages)}"
    prov.licence = DEBIAN_LICENCE
    for requested in cfg.packages:
        stanza = resolve(packages, requested)
        name = stanza["Package"]
        deb = archive.package(stanza["Filename"], stanza["SHA256"])
        prov.packages.append({"registry": "debian", "requested": requested, "name": name,
                              "version": stanza["Version"], "section": stanza.get("Section"),
                              "sha256": stanza["SHA256"]})
        prov.add_file(archive.store.path(stanza["SHA256"]), role="download", sha256=stanza["SHA256"], package=name)
        for rel, data in deb_files(deb, f"Debian package {name}"):
            if rel == f"usr/share/doc/{name}/copyright":
                _record_copyright(data, rel, name, prov)
            if not any(fnmatch.fnmatch(rel, pat) for pat in cfg.include):
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                prov.skip("invalid_utf8")
                continue
            yield Record(text=text, source=name, url=None,
                         meta={"package": name, "version": stanza["Version"], "path": "/" + rel})


def _record_copyright(data: bytes, rel: str, package: str, prov: Provenance) -> None:
    """Put the package's own licence statement (debian/copyright) into the manifest for auditors."""
    names = sorted({line.split(":", 1)[1].strip() for line in data.decode(errors="replace").splitlines()
                    if line.startswith("License:") and 0 < len(line.split(":", 1)[1].strip()) <= 40})
    prov.files.append({"path": f"{package}.deb!/{rel}", "role": "licence", "sha256": hashlib.sha256(data).hexdigest(),
                       "bytes": len(data), "package": package, "licences": names})


def long_description(desc: str) -> tuple[str, str]:
    """Split a Description-en field into (synopsis, body) following Debian Policy 5.6.13: the body's lines
    start with one space, a line of a single ``.`` is a paragraph break."""
    synopsis, _, rest = desc.partition("\n")
    lines = [line[1:] if line.startswith(" ") else line for line in rest.splitlines()]
    body = ["" if line.strip() == "." else line.rstrip() for line in lines]
    return synopsis.strip(), "\n".join(body).strip()


_BULLET = ("* ", "- ", "+ ", "o ", "#")


def unwrap(body: str) -> str:
    """Join each paragraph's wrapped lines into one; a blank-line follower, an indented line (Debian Policy
    5.6.13: verbatim) or a list item starts a new line."""
    out: list[str] = []
    for line in body.split("\n"):
        if out and out[-1] and line and not line[0].isspace() and not line.startswith(_BULLET):
            out[-1] = f"{out[-1]} {line.strip()}"
        else:
            out.append(line.rstrip())
    return "\n".join(out)


def read_debian_descriptions(cfg: DebianDescriptionsSource, ctx: SourceContext,
                             prov: Provenance) -> Iterator[Record]:
    names = [n for c in cfg.components for n in (f"{c}/binary-{cfg.architecture}/Packages", f"{c}/i18n/Translation-en")]
    _, indices = open_suite(cfg, ctx, prov, names)
    prov.description = ("Debian package descriptions (Packages + Translation-en), labeled by Section"
                        + (f"; sections {', '.join(cfg.sections)}" if cfg.sections else "; every section")
                        + (f" except {', '.join(cfg.exclude_sections)}" if cfg.exclude_sections else ""))
    prov.licence = DEBIAN_LICENCE
    stanzas = [st for name, data in indices.items() if name.endswith("Translation-en")
               for st in parse_stanzas(data.decode("utf-8", errors="replace").splitlines())]
    translations = {st["Description-md5"]: st["Description-en"] for st in stanzas
                    if "Description-md5" in st and "Description-en" in st}
    wanted, unwanted = set(cfg.sections), set(cfg.exclude_sections)
    packages = [st for name, data in indices.items() if name.endswith("Packages")
                for st in packages_by_name(data).values()]
    rows = []
    for st in packages:
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
