"""Data Docs offline: the CDN assets of Great Expectations' pages come from npm tarballs into the site, and every
page points at its copies by a relative path."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pandas as pd

from stages.quality.docs_assets import ALSO, ASSETS, CDN, VENDOR, folder_of, vendor
from stages.quality.gate import DATA_DOCS_INDEX, Expect, validate


def tarballs(root: Path) -> dict[str, Path]:
    """npm-style tarballs (package/...) holding every file ASSETS and ALSO name, with made-up contents."""
    made = {}
    for spec in {spec for spec, _ in ASSETS.values()}:
        path = root / f"{folder_of(spec)}.tgz"
        with tarfile.open(path, "w:gz") as tar:
            members = [m for s, m in ASSETS.values() if s == spec] + [f"{d}fa-solid.woff2" for d in ALSO.get(spec, ())]
            for member in [*members, "README.md"]:
                data = f"/* {spec} {member} */".encode()
                info = tarfile.TarInfo(f"package/{member}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        made[spec] = path
    return made


def test_the_pages_gx_renders_use_no_cdn_asset_the_table_lacks(tmp_path):
    """The installed Great Expectations' pages against ASSETS: an upgrade that adds a CDN file fails here."""
    project = tmp_path / "reports"
    validate("docs", {"t": pd.DataFrame({"x": [1, 2]})}, [Expect("t", "ExpectTableRowCountToBeBetween",
                                                                   {"min_value": 1})], project)
    site = (project / DATA_DOCS_INDEX).parent
    used = {m.group(0) for page in site.rglob("*.html") for m in CDN.finditer(page.read_text(encoding="utf-8"))}
    assert used and used <= set(ASSETS), sorted(used - set(ASSETS))


def test_vendoring_copies_each_asset_once_and_points_every_page_at_it(tmp_path):
    site = tmp_path / "site"
    (site / "validations" / "a").mkdir(parents=True)
    urls = sorted(ASSETS)
    page = "".join(f'<script src="{u}"></script>\n' for u in urls) + '<a href="https://greatexpectations.io">x</a>'
    (site / "index.html").write_text(page)
    (site / "validations" / "a" / "run.html").write_text(page)
    packs, fetched = tarballs(tmp_path), []

    def fetch(spec):
        fetched.append(spec)
        return packs[spec]

    assert vendor(site, fetch) == 2
    for url, (spec, member) in ASSETS.items():
        assert (site / VENDOR / folder_of(spec) / member).read_text() == f"/* {spec} {member} */"
    assert (site / VENDOR / "fortawesome-fontawesome-free@6.6.0" / "webfonts" / "fa-solid.woff2").is_file()
    assert not list((site / VENDOR).rglob("README.md"))       # only what the pages load
    index, nested = (site / "index.html").read_text(), (site / "validations" / "a" / "run.html").read_text()
    assert 'src="static/vendor/jquery@3.7.1/dist/jquery.min.js"' in index
    assert 'src="../../static/vendor/jquery@3.7.1/dist/jquery.min.js"' in nested
    assert not any(u in index or u in nested for u in urls)
    assert "https://greatexpectations.io" in index              # a link, not an asset: kept
    count = len(fetched)
    (site / "new.html").write_text(page)
    assert vendor(site, fetch) == 1 and len(fetched) == count   # the copies are there: nothing fetched again
